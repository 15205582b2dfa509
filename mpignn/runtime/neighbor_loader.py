"""`NeighborLoader`: PyG's NeighborLoader, shaped the same, over a distributed `LocalGraph`.

A script written for `torch_geometric.loader.NeighborLoader` keeps its arguments and its loop: `num_neighbors`,
`input_nodes` (a split name, a boolean mask or ids over the dataset's nodes, or None), `batch_size` per process,
`shuffle`, `drop_last`; each pass reshuffles and redraws by itself; batches carry `n_id` and `input_id` in the
dataset's ids. What differs: each rank's seeds are the input nodes it owns (its part), every rank yields the
same number of batches (collective), and the pipeline underneath is `loader.batches.BatchLoader`, the one
`python -m mpignn.train` uses.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from mpignn.config.choices import MINIBATCH_MODES, PREFETCH_MODES
from mpignn.config.graph_options import parse_fanout
from mpignn.data.hetero import edge_type_name, hop_fanouts
from mpignn.errors import ConfigError, MpignnError, mark_agreed
from mpignn.exchange.alltoall import MpiAlltoall
from mpignn.exchange.features import FeatureStore
from mpignn.loader.batches import BatchLoader, cut_steps
from mpignn.loader.local_graph import SPLITS, LocalGraph
from mpignn.loader.prefetch import overlap, rows_on_device
from mpignn.mpi import check_all
from mpignn.tasks import picker
from mpignn.training.loaders import cooperative_refusal, cooperative_sampler, rank_batch_size

__all__ = ["NeighborLoader"]

IGNORED = ("num_workers", "persistent_workers", "pin_memory")
"""PyG DataLoader keywords accepted and ignored: a producer thread (`prefetch`) replaces workers, and batches
for an accelerator are copied through pinned memory already."""


class NeighborLoader:
    """Mini-batches sampled around input nodes, as PyG's `NeighborLoader` gives them.

    Collective over the graph's communicator: constructing it agrees on the step count, and every rank must
    iterate it the same number of times (each batch fetches remote neighbours and features from their owners).

    Args:
        graph: this rank's part (`load_local_graph`).
        num_neighbors: neighbours per hop, outermost last; -1 takes all. A heterogeneous graph also takes
            {edge type "src__rel__dst": [per hop]} for the edge types that differ from `default` (-> all others).
        input_nodes: the seeds over the dataset's nodes: "train", "val" or "test"; a boolean mask of
            `num_nodes`; an id tensor or array; None for every node. Each rank takes those it owns. On a
            heterogeneous graph, nodes of its labelled type (also as PyG's `(type, nodes)`).
        batch_size: seeds per batch on each process (PyG's meaning). `batch_scope="global"`: the batch of
            all ranks together, each rank taking its ceiling-division share.
        shuffle: a new seed order each pass. Every rank yields the same number of batches (the rank with the
            most seeds sets it): a rank with fewer seeds spreads them evenly over that many smaller batches;
            with fewer seeds than batches, `shuffle` repeats some of them (training: every DDP step has data)
            and no shuffle leaves the surplus batches empty (`batch_size` 0: each seed counts once).
        drop_last: full batches only; the rank with the fewest seeds sets how many.
        seed: the shuffle's and the neighbour draws' seed; pass e uses `(seed, e)`.
        prefetch: "auto", "on" or "off": produce batch k+1 in a thread while batch k computes.
        minibatch: "independent": each rank samples and computes its seeds' neighbourhoods; "cooperative": the
            ranks sample one batch together and each sampled node is computed by its owner only (your model
            then runs the batch's `halo` between layers: mpignn's models do, `docs/training.md`); "full": one
            batch of all the input nodes and their whole neighbourhoods (`num_neighbors` -1 on every hop), made
            once and kept for every pass. The training CLI's `--minibatch`, with its refusals.

    Batches are PyG `Data` (`HeteroData` on a heterogeneous graph) on the runtime's device; their fields and
    `loss_scale` are in docs/api.md.
    """

    def __init__(self, graph: LocalGraph, num_neighbors: Sequence[int] | Mapping[str, Sequence[int]],
                 input_nodes: Any = None, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False, *,
                 batch_scope: str = "rank", seed: int = 0, prefetch: str = "auto", minibatch: str = "independent",
                 **kwargs: Any) -> None:
        rt = graph.runtime
        try:
            _check_keywords(kwargs)
            if rt is None:
                raise ConfigError("NeighborLoader needs a graph from mpignn.runtime.load_local_graph (it knows the "
                                  "ranks). HINT: graph = load_local_graph(bootstrap(), dataset)")
            if not isinstance(batch_size, int) or batch_size < 1:
                raise ConfigError(f"batch_size must be a positive int; got {batch_size!r}. HINT: batch_size=1024")
            if batch_scope not in ("rank", "global"):
                raise ConfigError(f"batch_scope must be 'rank' or 'global'; got {batch_scope!r}. "
                                  "HINT: batch_scope='rank' (PyG's meaning: per process)")
            if prefetch not in PREFETCH_MODES:
                raise ConfigError(f"prefetch must be one of {', '.join(PREFETCH_MODES)}; got {prefetch!r}. "
                                  "HINT: prefetch='auto'")
            if minibatch not in MINIBATCH_MODES:
                raise ConfigError(f"minibatch must be one of {', '.join(MINIBATCH_MODES)}; got {minibatch!r}. "
                                  "HINT: minibatch='independent'")
            problem = cooperative_refusal(graph, minibatch) if minibatch != "independent" else ""
            if problem:
                raise ConfigError(problem)
            fanouts = _fanouts(graph, num_neighbors)
            seeds = picker(graph.replicated, rt.world_size, rt.rank)(_seeds(graph, input_nodes), 0)
        except MpignnError as exc:  # the same arguments on every rank: the same error everywhere
            raise mark_agreed(exc) from None
        self.graph, self.num_neighbors = graph, num_neighbors
        full = minibatch == "full"
        sampler = graph.sampler.with_fanouts([-1] * len(fanouts) if full else fanouts)
        talks = rt.world_size > 1 and not graph.replicated
        if talks and minibatch != "independent":
            sampler = cooperative_sampler(rt, graph, sampler.fanouts, minibatch)
        per_rank = max(1, len(seeds)) if full else rank_batch_size(batch_size, rt.world_size, rt.rank, batch_scope)
        shuffle, drop_last = shuffle and not full, drop_last and not full  # full: one batch, the same each pass
        self.loader = BatchLoader(
            sampler, graph.features, seeds, per_rank, shuffle=shuffle, drop_last=drop_last, seed=seed,
            comm=rt.comm, device=rt.device,
            prefetch=not full and overlap(rt, talks, prefetch, device_exchange=rows_on_device(graph.features)),
            wrap=shuffle, layout=graph.layout, dataset_ids=_id_store(graph), reuse=full)
        sizes = np.array([[len(b) for b in cut_steps(np.arange(n), len(self.loader), size, drop_last, shuffle)]
                          for n, size in rt.comm.allgather((len(seeds), per_rank))], dtype=np.float64)
        total = sizes.sum(axis=0)
        self.loss_scales = np.divide(rt.world_size * sizes[rt.rank], total, out=np.zeros_like(total),
                                     where=total > 0)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        first = None
        for i, batch in enumerate(self.loader):
            first = self.loader.start_step if first is None else first  # known once the pass has begun
            batch.loss_scale = float(self.loss_scales[first + i])
            yield batch

    def set_epoch(self, epoch: int, start_step: int = 0, end_step: int | None = None) -> None:
        """Make the next pass epoch `epoch`'s (its shuffle and draws), from `start_step`: for resuming at an
        exact place. Without it each pass is the previous one's epoch plus one."""
        self.loader.set_epoch(epoch, start_step, end_step)

    @property
    def epoch(self) -> int:
        return self.loader.epoch

    @property
    def dataset(self) -> np.ndarray:
        """This rank's seeds (partition ids); `len(loader.dataset)` counts them, as PyG's loaders do."""
        return self.loader.source.ids


def _check_keywords(kwargs: dict[str, Any]) -> None:
    for key in kwargs:
        if key == "fanouts":
            raise ConfigError("NeighborLoader takes num_neighbors (as PyG's), not fanouts. "
                              "HINT: NeighborLoader(graph, num_neighbors=[15, 10], ...)")
        if key not in IGNORED:
            raise ConfigError(f"NeighborLoader got an unknown keyword {key!r}. HINT: see docs/api.md "
                              "(PyG DataLoader keywords mpignn accepts and ignores: " + ", ".join(IGNORED) + ")")


def _fanouts(graph: LocalGraph, num_neighbors: Any) -> list[Any]:
    """num_neighbors -> the sampler's fanouts (per hop; per edge type too on a heterogeneous graph)."""
    if isinstance(num_neighbors, Mapping):
        if graph.schema is None:
            raise ConfigError("num_neighbors per edge type needs a heterogeneous graph. HINT: num_neighbors=[15, 10]")
        per_type = {_edge_name(k): parse_fanout(v) for k, v in num_neighbors.items() if k != "default"}
        default = parse_fanout(num_neighbors["default"]) if "default" in num_neighbors else None
        hops = {len(v) for v in per_type.values()} | ({len(default)} if default is not None else set())
        if len(hops) != 1:  # PyG's NumNeighbors refuses this too ("Number of hops must be the same")
            raise ConfigError(f"num_neighbors must list the same number of hops for every edge type; got "
                              f"{per_type}. HINT: one list per edge type, each as "
                              "long as the model has layers")
        names = [edge_type_name(e) for e in graph.schema.edge_types]
        missing = [n for n in names if n not in per_type]
        if missing and default is None:  # PyG: "Missing number of neighbors for edge type"
            raise ConfigError(f"num_neighbors has no fanouts for edge type(s) {', '.join(missing)}. HINT: give "
                              "every edge type its list, or a 'default' key for the rest")
        return hop_fanouts(default or [-1] * hops.pop(), per_type, graph.schema)
    if isinstance(num_neighbors, (str, bytes)) or not isinstance(num_neighbors, Sequence):
        raise ConfigError(f"num_neighbors must list neighbours per hop (ints, -1 for all); got {num_neighbors!r}. "
                          "HINT: num_neighbors=[15, 10]")
    return hop_fanouts(parse_fanout(list(num_neighbors)), None, graph.schema)


def _edge_name(key: Any) -> str:
    return "__".join(key) if isinstance(key, tuple) else str(key)


def _seeds(graph: LocalGraph, input_nodes: Any) -> np.ndarray:
    """The partition ids of this rank's own input nodes (all of the graph's on a replicated graph). On a
    heterogeneous graph seeds are nodes of the labelled (target) type, and masks and ids are over that type."""
    part, schema = graph.part, graph.schema
    if schema is not None and isinstance(input_nodes, str) and input_nodes in schema.node_types:
        input_nodes = (input_nodes, None)  # PyG's node type name: every node of that type
    if isinstance(input_nodes, tuple) and len(input_nodes) == 2 and isinstance(input_nodes[0], str):
        if schema is None or input_nodes[0] != schema.target:  # PyG's (node type, nodes)
            raise ConfigError(f"input_nodes names node type {input_nodes[0]!r}; seeds are nodes of the graph's "
                              f"labelled type. HINT: input_nodes=({schema.target if schema else 'type'!r}, ...) "
                              "on a heterogeneous graph, the nodes alone otherwise")
        input_nodes = input_nodes[1]
    own = np.arange(part.lo, part.hi, dtype=np.int64) if schema is None else _target_nodes(graph)
    if input_nodes is None:
        return own
    if isinstance(input_nodes, str):
        if input_nodes not in SPLITS:
            raise ConfigError(f"input_nodes names no split: {input_nodes!r}. HINT: 'train', 'val', 'test', a "
                              "boolean mask or an id tensor over the dataset's nodes, or None for every node")
        return np.asarray(getattr(part, SPLITS[input_nodes]), dtype=np.int64)
    # the dataset's ids of the candidates (within the labelled type on a heterogeneous graph)
    own_ids = graph.node_id[own - part.lo]
    num_nodes = part.meta.num_nodes
    if schema is not None:
        k = schema.type_index(schema.target)
        own_ids, num_nodes = own_ids - schema.offsets[k], schema.node_counts[k]
    ids = input_nodes.detach().cpu().numpy() if isinstance(input_nodes, torch.Tensor) else np.asarray(input_nodes)
    problem = _ids_problem(ids, num_nodes)
    comm = graph.runtime.comm if graph.runtime is not None and graph.runtime.world_size > 1 else None
    if comm is not None:  # ranks may pass different ids (PyG's per-rank chunk): agree on any refusal first
        check_all(comm, not problem, problem, ConfigError)
    elif problem:
        raise ConfigError(problem)
    if ids.dtype == np.bool_:
        ids = np.flatnonzero(ids)
    # the union of every rank's ids: PyG's `split_idx[...].split(n // world_size)[rank]` gives each rank a chunk
    # holding other ranks' nodes, and each rank trains the nodes it owns, so the chunks together are trained
    joined = np.concatenate(comm.allgather(ids.astype(np.int64))) if comm is not None else ids.astype(np.int64)
    _, first = np.unique(joined, return_index=True)
    part_of = np.full(num_nodes, -1, dtype=np.int64)
    part_of[own_ids] = own
    seeds = part_of[joined[np.sort(first)]]  # in the order given (the first rank's first), as PyG keeps it
    return seeds[seeds >= 0]


def _ids_problem(ids: np.ndarray, num_nodes: int) -> str:
    """Why `input_nodes` given as a mask or ids cannot be read, or ""."""
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


def _target_nodes(graph: LocalGraph) -> np.ndarray:
    """Every own node of a heterogeneous graph's target type."""
    layout = graph.layout
    nodes = np.arange(graph.part.lo, graph.part.hi, dtype=np.int64)
    return nodes[layout.node_types(nodes) == layout.schema.type_index(layout.schema.target)]


def _id_store(graph: LocalGraph) -> FeatureStore:
    """The dataset's id and the label of any node, looked up like a feature row (two int64 columns, one where
    labels are not one int a node; own rows locally, others from their owners on the features' communicator,
    right after each batch's features): a batch's `y` holds every node's label, as PyG's does."""
    y = np.asarray(graph.part.y)
    columns = [graph.node_id, y] if y.ndim == 1 and y.dtype.kind in "iu" else [graph.node_id]
    table = np.ascontiguousarray(np.stack([np.asarray(c, dtype=np.int64) for c in columns], axis=1))
    comm = graph.features.comm
    offsets = graph.features.part_offsets
    return FeatureStore(table, graph.part.y, graph.part.lo, offsets, comm,
                        MpiAlltoall(comm) if comm is not None else None)
