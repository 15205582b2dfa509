"""`LinkNeighborLoader`: PyG's LinkNeighborLoader, shaped the same, over a distributed `LocalGraph`. Each seed
edge is kept by the rank owning its target; negatives are drawn from each positive's position, so any number of
ranks draws the negatives one process draws. Full reference: docs/api.md.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mpignn.errors import ConfigError
from mpignn.exchange.alltoall import IdDirectory
from mpignn.loader.local_graph import LocalGraph
from mpignn.mpi import alltoallv, check_all, chunk_bounds, segment_starts
from mpignn.partition.format import owner_of
from mpignn.runtime.loader_base import SampledBatches, as_array, joined_ids
from mpignn.sampling import kernels
from mpignn.sampling.neighbor import SampleOutput

__all__ = ["LinkNeighborLoader", "EdgeSeeds", "negative_ids"]


class LinkNeighborLoader(SampledBatches):
    """Mini-batches sampled around both ends of seed edges, as PyG's `LinkNeighborLoader` gives them.

    Collective over the graph's communicator: constructing it and every batch (features, the negatives' ids).

    Args:
        graph: this rank's part (`load_local_graph`).
        num_neighbors: as `NeighborLoader`'s.
        edge_label_index: [2, E] seed edges in dataset ids (or PyG's edge-type forms); None: every edge.
        edge_label: [E] labels of the seed edges (None: ones where negatives are drawn).
        neg_sampling: None, "binary", "triplet", {"mode": ..., "amount": ...} or PyG's `NegativeSampling`.
        neg_sampling_ratio: PyG's older form of {"mode": "binary", "amount": ratio}.
        batch_size: seed edges per batch per process (`batch_scope="global"`: of all ranks together).
        shuffle, drop_last, seed, prefetch: as `NeighborLoader`'s.
    """

    unsupported = {"edge_label_time": None, "time_attr": None, "weight_attr": None, "disjoint": False,
                   "replace": False, "subgraph_type": "directional", "temporal_strategy": "uniform"}
    """PyG LinkNeighborLoader keywords taken at their defaults only (no temporal, weighted or disjoint sampling)."""

    def __init__(self, graph: LocalGraph, num_neighbors: Sequence[int], edge_label_index: Any = None,
                 edge_label: Any = None, neg_sampling: Any = None, neg_sampling_ratio: float | None = None,
                 batch_size: int = 1, shuffle: bool = False, drop_last: bool = False, *, batch_scope: str = "rank",
                 seed: int = 0, prefetch: str = "auto", **kwargs: Any) -> None:
        super().__init__(graph, num_neighbors, batch_size, shuffle, drop_last, batch_scope=batch_scope, seed=seed,
                         prefetch=prefetch, options=kwargs, edge_label_index=edge_label_index, edge_label=edge_label,
                         neg_sampling=neg_sampling, neg_sampling_ratio=neg_sampling_ratio)

    def _source(self, graph: LocalGraph, edge_label_index: Any = None, edge_label: Any = None,
                neg_sampling: Any = None, neg_sampling_ratio: float | None = None
                ) -> tuple[EdgeSeeds, tuple[str, str, str] | None, str]:
        rt = graph.runtime
        edge_type, edge_label_index = _edge_type(graph, edge_label_index)
        mode, amount = _negatives(neg_sampling, neg_sampling_ratio)
        if mode == "triplet" and edge_label is not None:
            raise ConfigError("edge_label must be None with triplet negatives (PyG refuses it too). HINT: "
                              "tell positives from negatives by the batch's src_index, dst_pos_index and "
                              "dst_neg_index")
        talks = rt.world_size > 1 and not graph.replicated
        directory = IdDirectory(rt.comm if talks else None, graph.node_id, graph.part.lo,
                                graph.part.meta.num_nodes)  # the seeds' and every batch's negatives' ids
        ends = _end_types(graph, edge_type)
        edges, labels = _seed_edges(graph, directory, edge_label_index, edge_label, mode == "binary", edge_type, ends)
        return EdgeSeeds(edges, labels, mode, amount, ends, directory), edge_type, type(self).__name__


class EdgeSeeds:
    """Seed edges (partition ids [3, E]: source, target, position) and labels; each batch adds its negatives."""

    def __init__(self, edges: np.ndarray, labels: np.ndarray | None, mode: str | None, amount: float,
                 ends: np.ndarray, directory: IdDirectory) -> None:
        """`ends`: [[first id, count] of the source's type, of the target's] in the dataset's ids."""
        self.edges, self.labels, self.mode, self.amount = edges, labels, mode, amount
        self.ends, self.directory, self.pass_seed = ends, directory, 0

    def __len__(self) -> int:
        return self.edges.shape[1]

    def new_pass(self, pass_seed: int) -> None:
        self.pass_seed = pass_seed

    def draw(self, sampler: Any, items: np.ndarray, seed: int, variates: tuple[int, int] | None = None
             ) -> SampleOutput:
        """Collective (the negatives' ids): sample around both ends of `items` and their negatives."""
        src, dst, pos = self.edges[:, items]
        num_pos = len(items)
        label = self.labels[items] if self.labels is not None else None
        if self.mode is not None:
            owners, k = _negative_owners(pos, self.amount)
            types = self.ends[1:] if self.mode == "triplet" else self.ends  # triplet: targets only
            ends = negative_ids(self.pass_seed, pos[owners], k, types[:, 1]) + types[:, :1]
            ends = self.directory.lookup(ends.reshape(-1)).reshape(ends.shape)
            # triplet: each positive's source with its negative targets; binary: random pairs, labelled 0
            negative = (src[owners], ends[0]) if self.mode == "triplet" else (ends[0], ends[1])
            src, dst = np.concatenate([src, negative[0]]), np.concatenate([dst, negative[1]])
        if self.mode == "binary":
            label = label if label is not None else np.ones(num_pos, dtype=np.float32)
            label = np.concatenate([label, np.zeros(len(src) - num_pos, dtype=label.dtype)])
        out = sampler.sample_from_edges(src, dst, seed, variates)
        out.metadata = {"input_id": pos}
        if self.mode == "triplet":  # PyG's triplet fields in place of edge_label_index
            local, per = out.edge_label_index, int(self.amount)
            out.metadata.update(src_index=local[0, :num_pos], dst_pos_index=local[1, :num_pos],
                                dst_neg_index=local[1, num_pos:].reshape(num_pos, per) if per > 1 else
                                local[1, num_pos:])
            out.edge_label_index = None
        if label is not None:
            out.edge_label = label
        return out


def negative_ids(pass_seed: int, positions: np.ndarray, k: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """Return uniform negative ids per end, hashed from (pass seed, position, k, end): the same draw on any
    number of ranks and in any batch."""
    keys = (positions.astype(np.int64) << 20) ^ k.astype(np.int64)
    return np.stack([kernels.hashed_ids(keys, kernels.mix_seed(pass_seed, end), int(n))
                     for end, n in enumerate(counts)])


def _negative_owners(pos: np.ndarray, amount: float) -> tuple[np.ndarray, np.ndarray]:
    """floor((p + 1) a) - floor(p a) negatives at position p, so the total does not depend on the batching."""
    counts = (np.floor((pos + 1) * amount) - np.floor(pos * amount)).astype(np.int64)
    owners = np.repeat(np.arange(len(pos)), counts)
    return owners, np.arange(len(owners), dtype=np.int64) - np.repeat(segment_starts(counts), counts)


def _negatives(neg_sampling: Any, ratio: float | None) -> tuple[str | None, float]:
    if neg_sampling is None and ratio is not None:
        neg_sampling = {"mode": "binary", "amount": ratio}
    if neg_sampling is None:
        return None, 0.0
    if isinstance(neg_sampling, str):
        mode, amount = neg_sampling, 1.0
    elif isinstance(neg_sampling, dict):
        mode, amount = neg_sampling.get("mode"), neg_sampling.get("amount", 1.0)
    else:
        from torch_geometric.sampler import NegativeSampling

        if not isinstance(neg_sampling, NegativeSampling):
            raise ConfigError(f"neg_sampling must be None, 'binary', 'triplet', a dict or PyG's NegativeSampling; "
                              f"got {type(neg_sampling).__name__}. HINT: neg_sampling='binary'")
        if neg_sampling.src_weight is not None or neg_sampling.dst_weight is not None:
            raise ConfigError("neg_sampling with src_weight or dst_weight is not supported: negatives are "
                              "uniform. HINT: NegativeSampling(mode, amount)")
        mode, amount = str(getattr(neg_sampling.mode, "value", neg_sampling.mode)), neg_sampling.amount
    if mode not in ("binary", "triplet") or not isinstance(amount, (int, float)) or amount <= 0:
        raise ConfigError(f"neg_sampling must be 'binary' or 'triplet' with a positive amount; got mode {mode!r}, "
                          f"amount {amount!r}. HINT: neg_sampling={{'mode': 'binary', 'amount': 1}}")
    if mode == "triplet" and amount != int(amount):
        raise ConfigError(f"triplet negatives take a whole amount per positive (PyG's too); got {amount}. "
                          "HINT: neg_sampling={'mode': 'triplet', 'amount': 2}")
    return mode, float(amount)


def _edge_type(graph: LocalGraph, edge_label_index: Any) -> tuple[tuple[str, str, str] | None, Any]:
    named, index = _named_type(edge_label_index)
    schema = graph.schema
    if schema is None:
        if named is not None:
            raise ConfigError("edge_label_index names an edge type; this graph has one. HINT: pass the [2, E] "
                              "index alone")
        return None, index
    known = [tuple(e) for e in schema.edge_types]
    if named is None:
        raise ConfigError(f"on a heterogeneous graph edge_label_index names its edge type, as PyG's; got "
                          f"{type(edge_label_index).__name__}. HINT: edge_label_index={known[0]} or "
                          f"({known[0]}, index)")
    if len(named) == 2:  # PyG's (src, dst): the one type between them
        between = [e for e in known if (e[0], e[2]) == named]
        if len(between) != 1:
            raise ConfigError(f"edge_label_index names {named}: {len(between)} edge types join them. HINT: "
                              f"name one of {known} in full")
        named = between[0]
    if named not in known:
        raise ConfigError(f"edge_label_index names edge type {named}; the graph's are {known}. HINT: one of "
                          "graph.metadata()[1]")
    return named, index


def _named_type(value: Any) -> tuple[tuple[str, ...] | None, Any]:
    names = lambda v: isinstance(v, tuple) and len(v) in (2, 3) and all(isinstance(t, str) for t in v)  # noqa: E731
    if names(value):
        return tuple(value), None
    if isinstance(value, tuple) and len(value) == 2 and names(value[0]):
        return tuple(value[0]), value[1]
    return None, value


def _end_types(graph: LocalGraph, edge_type: tuple[str, str, str] | None) -> np.ndarray:
    schema, n = graph.schema, graph.part.meta.num_nodes
    if edge_type is None:
        return np.array([[0, n], [0, n]], dtype=np.int64)
    k = [schema.type_index(edge_type[0]), schema.type_index(edge_type[2])]
    return np.array([[schema.offsets[t], schema.node_counts[t]] for t in k], dtype=np.int64)


def _own_edges(graph: LocalGraph, edge_type: tuple[str, str, str] | None) -> tuple[np.ndarray, np.ndarray]:
    part = graph.part
    col = np.asarray(part.col, dtype=np.int64)
    dst = np.repeat(np.arange(part.lo, part.hi, dtype=np.int64), np.diff(part.rowptr))
    if edge_type is not None:  # runs of type_rowptr cycle through the edge types, row by row
        types, e = graph.schema.num_etypes, [tuple(t) for t in graph.schema.edge_types].index(edge_type)
        keep = np.repeat(np.arange(len(part.type_rowptr) - 1) % types == e, np.diff(part.type_rowptr))
        col, dst = col[keep], dst[keep]
    return col, dst


def _seed_edges(graph: LocalGraph, directory: IdDirectory, edge_label_index: Any, edge_label: Any, shift: bool,
                edge_type: tuple[str, str, str] | None, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Collective: this rank's seed edges [3, E] and labels (shifted up where 0 would mean a negative, as PyG)."""
    rt = graph.runtime
    talks = rt.world_size > 1 and not graph.replicated
    if edge_label_index is None:  # every edge: each rank its own targets' in-edges
        if edge_label is not None:
            raise ConfigError("edge_label needs the edge_label_index it labels. HINT: pass both, or neither")
        src, dst = _own_edges(graph, edge_type)
        start = int(sum(rt.comm.allgather(len(src))[:rt.rank])) if talks else 0
        edges = np.stack([src, dst, start + np.arange(len(src), dtype=np.int64)])
        if graph.replicated:
            lo, hi = chunk_bounds(edges.shape[1], rt.world_size, rt.rank)
            edges = edges[:, lo:hi]
        return edges, None
    index, labels = as_array(edge_label_index), None if edge_label is None else as_array(edge_label)
    problem = ""
    if index.ndim != 2 or index.shape[0] != 2 or not np.issubdtype(index.dtype, np.integer):
        problem = (f"edge_label_index must be a [2, E] integer tensor of dataset ids; got dtype {index.dtype} shape "
                   f"{tuple(index.shape)}. HINT: edge_label_index=data.edge_index")
    elif index.size and ((index < 0).any() or (index >= ends[:, 1:]).any()):
        end = int(np.flatnonzero((index.min(axis=1) < 0) | (index.max(axis=1) >= ends[:, 1]))[0])
        problem = (f"edge_label_index row {end} holds ids outside [0, {ends[end, 1]}): {int(index[end].min())}.."
                   f"{int(index[end].max())}. HINT: ids are the dataset's node ids" +
                   (" within each end's type" if edge_type is not None else ""))
    elif labels is not None and labels.shape[:1] != index.shape[1:]:
        problem = (f"edge_label must hold one label per seed edge ({index.shape[1]}); got shape "
                   f"{tuple(labels.shape)}. HINT: edge_label of shape [E]")
    check_all(rt.comm, not problem, problem, ConfigError)
    index = joined_ids(rt.comm, index.astype(np.int64)) + ends[:, :1]  # each end's type's first id
    labels = None if labels is None else joined_ids(rt.comm, labels)
    if shift and labels is not None and labels.size and labels.min() == 0:
        labels = labels + 1
    lo, hi = chunk_bounds(index.shape[1], rt.world_size, rt.rank)  # each rank looks up a share of the positions
    ends = directory.lookup(index[:, lo:hi].reshape(-1)).reshape(2, -1)
    rows = np.stack([ends[0], ends[1], np.arange(lo, hi, dtype=np.int64)], axis=1)
    if not talks:  # one process, or a replicated graph: the share is this rank's
        return np.ascontiguousarray(rows.T), None if labels is None else labels[lo:hi]
    owner = owner_of(rows[:, 1], graph.features.part_offsets)  # the share goes to its targets' owners
    order = np.argsort(owner, kind="stable")
    got, _ = alltoallv(rt.comm, rows[order], np.bincount(owner, minlength=rt.world_size))
    got = got[np.argsort(got[:, 2], kind="stable")]  # in the order given, as PyG keeps it without shuffle
    return np.ascontiguousarray(got.T), None if labels is None else labels[got[:, 2]]
