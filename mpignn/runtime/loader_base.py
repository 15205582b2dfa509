"""What both PyG-shaped loaders share: argument checks, the `BatchLoader` pipeline `python -m mpignn.train` uses
too, every batch node's dataset id and label, and the per-step `loss_scale`.
"""
from __future__ import annotations

import hashlib
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from mpignn.config.choices import PREFETCH_MODES
from mpignn.config.graph_options import parse_fanout
from mpignn.data.hetero import edge_type_name, hop_fanouts
from mpignn.errors import ConfigError, agreed
from mpignn.exchange.features import FeatureStore
from mpignn.loader.batches import BatchLoader, cut_steps
from mpignn.loader.local_graph import LocalGraph
from mpignn.training.loaders import check_minibatch, cooperative_refusal, loader_arguments

__all__ = ["IGNORED", "SampledBatches", "as_array", "check_options", "fanouts_of", "id_store", "joined_ids"]

IGNORED = ("num_workers", "persistent_workers", "pin_memory")
"""PyG DataLoader keywords accepted and ignored: a producer thread replaces workers; pinned copies happen anyway."""


def as_array(value: Any) -> np.ndarray:
    """Return a tensor's values (detached, on the CPU) or anything array-like as a numpy array."""
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def check_options(kwargs: dict[str, Any], graph: LocalGraph, batch_size: Any, batch_scope: str, prefetch: str,
                  name: str, unsupported: Mapping[str, Any]) -> None:
    """Refuse keywords the loader `name` does not take (PyG's worker keywords are accepted and ignored, those of
    `unsupported` at their defaults there), a graph without its runtime and out-of-range loader options, in one
    line each."""
    for key, value in kwargs.items():
        if key == "fanouts":
            raise ConfigError(f"{name} takes num_neighbors (as PyG's), not fanouts. "
                              f"HINT: {name}(graph, num_neighbors=[15, 10], ...)")
        if key in unsupported and value != unsupported[key]:
            raise ConfigError(f"{name} takes {key} at PyG's default ({unsupported[key]!r}) only. "
                              f"HINT: drop {key}=...")
        if key not in IGNORED and key not in unsupported:
            raise ConfigError(f"{name} got an unknown keyword {key!r}. HINT: see docs/api.md "
                              "(PyG DataLoader keywords mpignn accepts and ignores: " + ", ".join(IGNORED) + ")")
    if not isinstance(graph, LocalGraph) or graph.runtime is None:
        raise ConfigError(f"{name} needs a graph from mpignn.runtime.load_local_graph (it knows the ranks); got "
                          f"{type(graph).__name__}. HINT: graph = load_local_graph(rt, data) (a PyG Data or "
                          "HeteroData on rank 0) or load_local_graph(rt, 'Cora')")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive int; got {batch_size!r}. HINT: batch_size=1024")
    if batch_scope not in ("rank", "global"):
        raise ConfigError(f"batch_scope must be 'rank' or 'global'; got {batch_scope!r}. "
                          "HINT: batch_scope='rank' (PyG's meaning: per process)")
    if prefetch not in PREFETCH_MODES:
        raise ConfigError(f"prefetch must be one of {', '.join(PREFETCH_MODES)}; got {prefetch!r}. "
                          "HINT: prefetch='auto'")


class SampledBatches(BatchLoader):
    """Collective over the graph's communicator: PyG's loader interface on a `BatchLoader`, built as the training
    CLI builds its own (`loader_arguments`); each batch carries `loss_scale` (world size x this rank's items / all
    ranks' items in the step). A subclass says where its seeds come from: `_source(graph, **inputs)`, collective,
    returns (this rank's seed source for `BatchLoader`, the seeds' type, the loader in the watchdog's words)."""

    unsupported: Mapping[str, Any] = {}
    """PyG keywords the loader takes at their defaults only."""

    def __init__(self, graph: LocalGraph, num_neighbors: Any, batch_size: int, shuffle: bool, drop_last: bool, *,
                 batch_scope: str, seed: int, prefetch: str, minibatch: str = "independent",
                 options: dict[str, Any], **inputs: Any) -> None:
        """`options`: the caller's other keywords; `inputs`: what `_source` takes."""
        name = type(self).__name__
        check_minibatch(minibatch)  # first: before the refusal's and the seeds' collectives
        with agreed():  # the same arguments on every rank: the same error everywhere
            check_options(options, graph, batch_size, batch_scope, prefetch, name, self.unsupported)
            problem = cooperative_refusal(graph, minibatch) if minibatch != "independent" else ""
            if problem:
                raise ConfigError(problem)
            fanouts = fanouts_of(graph, num_neighbors)
            source, seed_type, label = self._source(graph, **inputs)
        rt, self.graph, self.num_neighbors = graph.runtime, graph, num_neighbors
        super().__init__(**loader_arguments(rt, graph, graph.sampler.with_fanouts(fanouts), source, batch_size,
                                            batch_scope, minibatch, prefetch=prefetch, shuffle=shuffle,
                                            drop_last=drop_last, wrap=shuffle, seed=seed, dataset_ids=id_store(graph),
                                            name=label, seed_type=seed_type))
        sizes = np.array([[len(b) for b in cut_steps(np.arange(n), self.steps, size, self.drop_last, self.wrap)]
                          for n, size in rt.comm.allgather((len(self.source), self.batch_size))], dtype=np.float64)
        total = sizes.sum(axis=0)
        self.loss_scales = np.divide(rt.world_size * sizes[rt.rank], total, out=np.zeros_like(total),
                                     where=total > 0)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = type(self).__name__
        raise ConfigError(f"{name} is not called on chosen seeds (PyG's loader(index)): its batches are collective. "
                          f"HINT: a new {name} with input_nodes=index (edge_label_index=index for links)")

    def __iter__(self) -> Iterator[Any]:
        first = None
        for i, batch in enumerate(super().__iter__()):
            first = self.start_step if first is None else first  # known once the pass has begun
            batch.loss_scale = float(self.loss_scales[first + i])
            yield batch


def fanouts_of(graph: LocalGraph, num_neighbors: Any) -> list[Any]:
    """num_neighbors -> the sampler's fanouts (per hop; per edge type too on a heterogeneous graph)."""
    if isinstance(num_neighbors, Mapping):
        if graph.schema is None:
            raise ConfigError("num_neighbors per edge type needs a heterogeneous graph. HINT: num_neighbors=[15, 10]")
        per_type = {"__".join(k) if isinstance(k, tuple) else str(k): _hops(v) for k, v in num_neighbors.items()
                    if k != "default"}
        default = _hops(num_neighbors["default"]) if "default" in num_neighbors else None
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
    return hop_fanouts(_hops(num_neighbors), None, graph.schema)


def _hops(values: Any) -> list[int]:
    """One hop list of num_neighbors, refused in the loader's words (PyG's `[]`, zero hops, included)."""
    try:
        return parse_fanout(list(values))
    except (ConfigError, TypeError):
        raise ConfigError(f"num_neighbors must list a positive int (or -1 for all) per hop, one hop at least; "
                          f"got {values!r}. HINT: num_neighbors=[15, 10] (batches of seeds alone, PyG's [], are "
                          "not taken)") from None


def id_store(graph: LocalGraph) -> FeatureStore:
    """Look up any node's dataset id and label like a feature row, so a batch's `y` covers every node, as PyG's."""
    y = np.asarray(graph.part.y)
    columns = [graph.node_id, y] if y.ndim == 1 and y.dtype.kind in "iu" else [graph.node_id]
    table = np.ascontiguousarray(np.stack([np.asarray(c, dtype=np.int64) for c in columns], axis=1))
    return FeatureStore(table, graph.part.y, graph.part.lo, graph.features.part_offsets, graph.features.comm)


def joined_ids(comm: Any, array: np.ndarray) -> np.ndarray:
    """Collective over `comm`: return `array` if every rank passed the same, else all ranks' joined in rank order
    (PyG's per-rank chunks): the list `input_id` indexes."""
    array = np.ascontiguousarray(array)
    digest = hashlib.sha256(f"{array.shape}{array.dtype}".encode() + array.tobytes()).hexdigest()
    if len(set(comm.allgather(digest))) == 1:  # the whole list on every rank: nothing more travels
        return array
    return np.concatenate(comm.allgather(array), axis=-1)
