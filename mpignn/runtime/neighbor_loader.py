"""`NeighborLoader`: PyG's NeighborLoader, shaped the same, over a distributed `LocalGraph`. A PyG script keeps
its arguments and loop; each rank's seeds are the input nodes it owns, and every rank yields the same number of
batches. Full reference: docs/api.md.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from mpignn.errors import ConfigError
from mpignn.loader.batches import NodeSeeds
from mpignn.loader.local_graph import SPLITS, LocalGraph
from mpignn.mpi import check_all
from mpignn.runtime.loader_base import SampledBatches, as_array, joined_ids
from mpignn.tasks import picker

__all__ = ["NeighborLoader"]


class NeighborLoader(SampledBatches):
    """Mini-batches sampled around input nodes, as PyG's `NeighborLoader` gives them (fields: docs/api.md).

    Collective over the graph's communicator: constructing it agrees on the step count, and every rank must
    iterate it the same number of times (each batch fetches remote neighbours and features from their owners).

    Args:
        graph: this rank's part (`load_local_graph`).
        num_neighbors: neighbours per hop (-1: all); on a heterogeneous graph also a dict per edge type.
        input_nodes: a split name, a boolean mask, ids over the dataset's nodes, or None; each rank takes its own.
        batch_size: seeds per batch per process; `batch_scope="global"`: of all ranks together.
        shuffle: a new seed order each pass; with fewer seeds than batches it repeats some, so every DDP step
            has data (no shuffle leaves the surplus batches empty).
        drop_last: full batches only; the rank with the fewest seeds sets how many.
        seed: the shuffle's and the draws' seed; pass e uses `(seed, e)`.
        prefetch: "auto", "on" or "off": produce batch k+1 in a thread while batch k computes.
        minibatch: the CLI's `--minibatch` ("independent", "cooperative", "full"), with its refusals.
    """

    def __init__(self, graph: LocalGraph, num_neighbors: Sequence[int] | Mapping[str, Sequence[int]],
                 input_nodes: Any = None, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False, *,
                 batch_scope: str = "rank", seed: int = 0, prefetch: str = "auto", minibatch: str = "independent",
                 **kwargs: Any) -> None:
        super().__init__(graph, num_neighbors, batch_size, shuffle, drop_last, batch_scope=batch_scope, seed=seed,
                         prefetch=prefetch, minibatch=minibatch, options=kwargs, input_nodes=input_nodes)

    def _source(self, graph: LocalGraph, input_nodes: Any = None) -> tuple[NodeSeeds, int | None, str]:
        rt = graph.runtime
        kind, nodes = seed_type(graph, input_nodes)
        seeds, positions = picker(graph.replicated, rt.world_size, rt.rank)(_seeds(graph, kind, nodes), 1)
        return NodeSeeds(seeds, positions), kind, f"NeighborLoader(input_nodes={_label(input_nodes)})"

    @property
    def dataset(self) -> np.ndarray:
        """This rank's seeds (partition ids); `len(loader.dataset)` counts them, as PyG's loaders do."""
        return self.source.ids


def _seeds(graph: LocalGraph, kind: int | None, input_nodes: Any) -> np.ndarray:
    """Collective: [2, N]: this rank's own input nodes (partition ids) and their `input_id` positions."""
    part, schema = graph.part, graph.schema
    own = np.arange(part.lo, part.hi, dtype=np.int64)
    offset, num_nodes = 0, part.meta.num_nodes  # the dataset's ids within the seeds' type
    if kind is not None:
        own = own[graph.layout.node_types(own) == kind]
        offset, num_nodes = schema.offsets[kind], schema.node_counts[kind]
    comm = graph.runtime.comm
    if input_nodes is None:
        return np.stack([own, graph.node_id[own - part.lo] - offset])
    if isinstance(input_nodes, str):
        if input_nodes not in SPLITS:
            raise ConfigError(f"input_nodes names no split: {input_nodes!r}. HINT: 'train', 'val', 'test', a "
                              "boolean mask or an id tensor over the dataset's nodes, or None for every node")
        seeds = np.asarray(getattr(part, SPLITS[input_nodes]), dtype=np.int64)
        ids = graph.node_id[seeds - part.lo]
        return np.stack([seeds, np.searchsorted(graph.split_ids(input_nodes), ids)])
    own_ids = graph.node_id[own - part.lo] - offset  # the dataset's ids of the candidates
    ids = as_array(input_nodes)
    problem = _ids_problem(ids, num_nodes)
    check_all(comm, not problem, problem, ConfigError)  # ranks may pass different ids (PyG's per-rank chunk)
    if ids.dtype == np.bool_:
        ids = np.flatnonzero(ids)
    # the union of every rank's ids: PyG's per-rank chunk holds other ranks' nodes, and each rank trains its own
    joined = joined_ids(comm, ids.astype(np.int64))
    _, first = np.unique(joined, return_index=True)
    first.sort()  # in the order given (the first rank's first), as PyG keeps it
    part_of = np.full(num_nodes, -1, dtype=np.int64)
    part_of[own_ids] = own
    seeds = part_of[joined[first]]
    return np.stack([seeds, first])[:, seeds >= 0]


def _ids_problem(ids: np.ndarray, num_nodes: int) -> str:
    if ids.dtype == np.bool_:
        if ids.shape != (num_nodes,):
            return (f"input_nodes is a mask of shape {tuple(ids.shape)}, the graph has {num_nodes} nodes. "
                    f"HINT: a boolean mask of shape ({num_nodes},) over the dataset's node ids")
        return ""
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        return (f"input_nodes must be a split name, a boolean mask or a 1-D integer id tensor; got dtype {ids.dtype} "
                f"shape {tuple(ids.shape)}. HINT: mask.nonzero().view(-1)")
    if len(np.unique(ids)) != len(ids):  # PyG would train such a node twice an epoch; here each node is one seed
        return (f"input_nodes holds {len(ids) - len(np.unique(ids))} repeated id(s); each node is one seed here. "
                "HINT: input_nodes=ids.unique() (or a boolean mask)")
    if len(ids) and (ids.min() < 0 or ids.max() >= num_nodes):
        return (f"input_nodes holds ids outside [0, {num_nodes}): {int(ids.min())}..{int(ids.max())}. "
                "HINT: ids are the dataset's node ids")
    return ""


def seed_type(graph: LocalGraph, input_nodes: Any) -> tuple[int | None, Any]:
    """Return (the seeds' node type index or None, the nodes) from PyG's forms; default: the labelled type."""
    schema = graph.schema
    named = isinstance(input_nodes, tuple) and len(input_nodes) == 2 and isinstance(input_nodes[0], str)
    if schema is None:
        if named:
            raise ConfigError(f"input_nodes names node type {input_nodes[0]!r}; this graph has one node type. "
                              "HINT: pass the nodes alone")
        return None, input_nodes
    if isinstance(input_nodes, str) and input_nodes in schema.node_types:
        input_nodes, named = (input_nodes, None), True  # PyG's node type name: every node of that type
    if not named:
        return schema.type_index(schema.target), input_nodes
    if input_nodes[0] not in schema.node_types:
        raise ConfigError(f"input_nodes names node type {input_nodes[0]!r}; the graph's types are "
                          f"{', '.join(schema.node_types)}. HINT: input_nodes=(type, ids) of one of them")
    if isinstance(input_nodes[1], str) and input_nodes[0] != schema.target:
        raise ConfigError(f"input_nodes=({input_nodes[0]!r}, {input_nodes[1]!r}): the splits hold nodes of the "
                          f"labelled type {schema.target!r}. HINT: ({schema.target!r}, {input_nodes[1]!r}), or "
                          f"({input_nodes[0]!r}, ids)")
    return schema.type_index(input_nodes[0]), input_nodes[1]


def _label(input_nodes: Any) -> str:
    """`input_nodes` in the watchdog's words; ids as "ids" (each rank's may differ)."""
    if input_nodes is None or isinstance(input_nodes, str):
        return repr(input_nodes)
    if isinstance(input_nodes, tuple) and len(input_nodes) == 2 and isinstance(input_nodes[0], str):
        return f"({input_nodes[0]!r}, {_label(input_nodes[1]) if isinstance(input_nodes[1], str) else 'ids'})"
    return "ids"
