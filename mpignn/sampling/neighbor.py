"""Multi-hop neighbour sampling over a CSR graph -> SampleOutput (index arrays only; never features).

`NeighborSampler` runs the hops; where a hop's neighbours come from is a `HopSource`: the rank's own CSR
(`LocalHops`) or, in `mpignn.sampling.distributed`, the owners of remote nodes.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, Union

import numpy as np

from mpignn.compiled import read_only
from mpignn.config.choices import SAMPLERS
from mpignn.sampling import kernels
from mpignn.sampling.kernels import ARRAY_MAP_BYTES
from mpignn.sampling.labor import labor_importance, labor_rows

__all__ = ["SampleOutput", "HopSource", "LocalHops", "NeighborSampler", "Fanout", "fanout_array",
           "loop_free_degree", "draw_hop"]


@dataclass
class SampleOutput:
    """One sampled mini-batch, in PyG's layout: `n_id` global ids (seeds first), edges `row` -> `col` grouped by
    hop, then by ascending target.

    `in_degree` gives each hop's CSR pointer as its running sum, so a model needs no bincount (a host sync on GPUs).
    """

    n_id: np.ndarray
    row: np.ndarray
    col: np.ndarray
    batch_size: int
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    edge_label_index: np.ndarray | None = None  # from sample_from_edges: the pairs, in batch-local ids
    edge_type: np.ndarray | None = None  # int64 [E], heterogeneous graphs: each edge's type (index)
    in_degree: np.ndarray | None = None  # int64 [sum(num_sampled_nodes[:-1])], see above
    mean_over: np.ndarray | None = None  # "labor": int64 like in_degree, what each target's mean divides by
    edge_weight: np.ndarray | None = None  # LABOR-i, i > 0: float32 [E], each edge's importance weight
    halo: list | None = None  # cooperative batches: a `sampling.cooperative.LayerPlan` per layer
    edge_label: np.ndarray | None = None  # a seed source's labels of `edge_label_index` (`tasks.link.LinkSeeds`)
    metadata: dict[str, Any] = field(default_factory=dict)  # what else the seed source's batches carry, by name


class HopSource(Protocol):
    num_etypes: int

    def sample(self, gids: np.ndarray, fanout: Fanout, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(counts per target and edge type [len(gids) * num_etypes], neighbour gids in that order)."""
        ...

    def sample_labor(self, gids: np.ndarray, fanout: Fanout, seed: int,
                     shift: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`sample` by layer-neighbour sampling, plus what each target's mean divides by (homogeneous graphs);
        `shift` rotates the variates (`sampling.labor.window`)."""
        ...


Fanout = Union[int, Sequence[int]]
"""One hop's fanout: one number for every edge type, or one per edge type (-1: all)."""


def fanout_array(fanout: Fanout, num_etypes: int) -> np.ndarray:
    """int64 [num_etypes] fanouts of one hop (an int applies to every edge type)."""
    out = np.broadcast_to(np.asarray(fanout, dtype=np.int64).reshape(-1), (num_etypes,))
    return np.ascontiguousarray(out)


class LocalHops:
    """Neighbours from a CSR whose rows are the global ids [lo, lo + num_rows).

    With `type_rowptr` each (target, edge type) is one row of the same kernel, with its own fanout and stream.
    """

    comm = None  # reads no other rank (`DistributedHops` does)

    def __init__(self, rowptr: np.ndarray, col: np.ndarray, lo: int = 0, type_rowptr: np.ndarray | None = None,
                 num_etypes: int = 1) -> None:
        self.rowptr = np.ascontiguousarray(rowptr, dtype=np.int64)
        self.col = np.ascontiguousarray(col, dtype=np.int64)
        self.lo = int(lo)
        self.num_etypes = int(num_etypes)
        if self.num_etypes > 1 and type_rowptr is None:
            raise ValueError("num_etypes > 1 needs type_rowptr")
        self.type_rowptr = None if type_rowptr is None else np.ascontiguousarray(type_rowptr, dtype=np.int64)

    @property
    def local(self) -> "LocalHops":
        """The rank's own CSR (a `DistributedHops` wraps one)."""
        return self

    def counters(self) -> dict[str, float]:
        """Nothing crosses ranks here (`run_epoch` diffs each component's counters)."""
        return {}

    def sample(self, gids: np.ndarray, fanout: Fanout, seed: int) -> tuple[np.ndarray, np.ndarray]:
        t = self.num_etypes
        if t == 1:
            return self._draw("sample_rows", False, (gids - self.lo, gids), fanout, seed)
        kinds = np.arange(t, dtype=np.int64)  # a row of `type_rowptr` per (target, edge type), keyed alike
        rows, keys = ((gids - self.lo) * t)[:, None] + kinds, (gids * t)[:, None] + kinds
        return self._draw("sample_rows", True, (rows.reshape(-1), keys.reshape(-1)), fanout, seed)

    def sample_labor(self, gids: np.ndarray, fanout: Fanout, seed: int,
                     shift: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.num_etypes > 1:
            raise ValueError("layer-neighbour sampling takes homogeneous graphs")
        return self._draw("labor_rows", False, (gids - self.lo,), fanout, seed, shift)

    _kernels = {"sample_rows": kernels.sample_rows, "labor_rows": labor_rows}  # DeviceHops: their torch-op twins

    def _draw(self, kernel: str, typed: bool, ids: tuple, fanout: Fanout, *args: int) -> tuple:
        arrays = (self.type_rowptr if typed else self.rowptr, self.col, *ids, fanout_array(fanout, self.num_etypes))
        return self._kernels[kernel](*map(read_only, arrays), *args)  # one compiled variant


def draw_hop(sampler: Any, gids: np.ndarray, fanout: Fanout, hop: int, seed: int,
             variates: tuple[int, int] | None, reduce: Any = None) -> tuple[Any, Any, Any, Any]:
    """Hop `hop` of `gids` as `sampler.method` says, so every sampler draws a hop alike; "labor" draws from
    `variates` (a seed and a shift) where given, else from the batch's `seed`. Returns (counts, nbrs, mean_over,
    edge weight); mean_over is None for "neighbor", the weight None but for LABOR-i.
    """
    if sampler.method != "labor":
        counts, nbrs = sampler.source.sample(gids, fanout, kernels.mix_seed(seed, hop))
        return counts, nbrs, None, None
    labor_seed, shift = variates if variates is not None else (seed, 0)
    hop_seed = kernels.mix_seed(labor_seed, 0 if sampler.layer_dependency else hop)
    if not sampler.iterations:
        return (*sampler.source.sample_labor(gids, fanout, hop_seed, shift), None)
    # LABOR-i: the targets' whole neighbourhoods from the source, then the iterations here, so a rank's hop equals
    # one process's. A device hop runs the torch-op twin there, bit for bit.
    counts, nbrs = sampler.source.sample(gids, -1, 0)
    args = (int(fanout_array(fanout, 1)[0]), hop_seed, shift, sampler.iterations)
    if not isinstance(nbrs, np.ndarray):  # a DeviceSampler's hop (one part: nothing to reduce over ranks)
        from mpignn.sampling import torch_kernels

        return torch_kernels.labor_importance(counts, nbrs, *args)
    ptr = np.zeros(len(gids) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return labor_importance(ptr, nbrs, *args, reduce, sampler.num_nodes)


def loop_free_degree(rowptr: np.ndarray, col: np.ndarray, lo: int) -> np.ndarray:
    """int64 [rows]: each row's in-edges other than self-loops, the degree PyG's `gcn_norm` adds one loop to."""
    n = len(rowptr) - 1
    own = np.repeat(np.arange(lo, lo + n, dtype=np.int64), np.diff(rowptr))
    return np.diff(rowptr) - np.bincount(own[np.asarray(col) == own] - lo, minlength=n)


class NeighborSampler:
    """Sample `len(fanouts)` hops around seed nodes.

    Thread-safe: each thread keeps its own global-id -> batch-index map. `relabel` "array" is one int64 per
    global node; "part" one per own node plus a hash table sized by the batch, so memory follows the part (its
    cost: docs/benchmarks.md); "auto" the array where the source owns every node, else the part map.

    "labor" batches also carry `mean_over`, what each target's mean divides by; `dependency`: how many
    consecutive steps share their variates (`sampling.labor.window`); `layer_dependency`: every hop draws with
    the first hop's seed; LABOR-i batches (`iterations` > 0) carry `edge_weight`.
    """

    cooperative = False  # each rank draws its own batch (`CooperativeSampler`: one batch of all ranks)
    keep_inputs = False

    def __init__(self, source: HopSource, num_nodes: int, fanouts: Sequence[Fanout], relabel: str = "auto",
                 method: str = "neighbor", dependency: int = 1, layer_dependency: bool = False,
                 iterations: int = 0) -> None:
        if relabel not in ("auto", "part", "array"):
            raise ValueError(f"relabel must be 'auto', 'part' or 'array'; got {relabel!r}")
        if method not in SAMPLERS:
            raise ValueError(f"method must be one of {', '.join(SAMPLERS)}; got {method!r}")
        local = getattr(source, "local", source)  # DistributedHops wraps the rank's LocalHops
        rowptr = getattr(local, "rowptr", None)
        self._own = (int(local.lo), len(rowptr) - 1) if rowptr is not None else (0, 0)
        if relabel == "auto":
            whole = self._own == (0, int(num_nodes))
            relabel = "array" if whole or (rowptr is None and 8 * int(num_nodes) <= ARRAY_MAP_BYTES) else "part"
        self.source = source
        self.num_nodes = int(num_nodes)
        self.fanouts = list(fanouts)
        self.relabel = relabel
        self.method, self.dependency, self.layer_dependency = method, int(dependency), bool(layer_dependency)
        self.iterations = int(iterations)
        # Owning every node (one process, --replicated): the part map is the array map; skip the range checks.
        self._direct = relabel == "array" or self._own == (0, self.num_nodes)
        self._local = threading.local()
        self._evaluation: NeighborSampler | None = None  # `for_evaluation`'s, made once

    def new_pass(self) -> None:
        """The loader starts a pass: nothing is kept between batches here."""

    def counters(self) -> dict[str, float]:
        """Its hops' traffic is its source's, which reports it itself (`DistributedHops.counters`)."""
        return {}

    def with_fanouts(self, fanouts: Sequence[Fanout]) -> "NeighborSampler":
        """This sampler (source, method, dependencies) drawing `fanouts`."""
        return type(self)(self.source, self.num_nodes, fanouts, method=self.method, dependency=self.dependency,
                          layer_dependency=self.layer_dependency, iterations=self.iterations)

    def for_evaluation(self) -> "NeighborSampler":
        """Neighbour sampling at this one's fanouts, whatever trains: layer-neighbour batches' noisier means
        scored a model under exact inference (docs/training.md). Made once, so val and test share its id maps."""
        if self.method == "neighbor":
            return self
        if self._evaluation is None:
            self._evaluation = type(self)(self.source, self.num_nodes, self.fanouts)
        return self._evaluation

    @property
    def scratch_bytes(self) -> int:
        """Bytes of one sampling thread's id map (without the batch-sized hash table)."""
        return 8 * (self.num_nodes if self.relabel == "array" else self._own[1])

    def _scratch(self) -> np.ndarray:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:  # `_empty`: on the device for `DeviceSampler`
            scratch = self._local.scratch = self._empty(self.scratch_bytes // 8)
            scratch[:] = -1
        return scratch

    def _table(self) -> tuple[np.ndarray, int]:
        table = getattr(self._local, "table", None)
        if table is None:
            table = self._local.table = np.full(2 * 1024, -1, dtype=np.int64)
            self._local.in_table = 0
        return table, 65 - (len(table) >> 1).bit_length()  # shift = 64 - log2(slots)

    def _map(self, ids: np.ndarray, n_id: np.ndarray, n_count: int) -> tuple[np.ndarray, int]:
        """Batch-local index of each id, new ones appended to n_id (kernels.relabel semantics)."""
        if self._direct:
            return kernels.relabel(ids, self._scratch(), n_id, n_count)
        scratch, lo = self._scratch(), self._own[0]
        table, shift = self._table()
        local = np.empty(len(ids), dtype=np.int64)
        done = 0
        while True:
            done, n_count, self._local.in_table = kernels.relabel_hashed(
                ids, done, local, scratch, lo, table, shift, n_id, n_count, self._local.in_table, len(table) >> 2)
            if done == len(ids):
                return local, n_count
            table = self._local.table = np.full(2 * len(table), -1, dtype=np.int64)  # load reached 1/2: grow
            shift -= 1
            kernels.rehash(table, shift, n_id, n_count, lo, len(scratch))

    def _clear(self, n_id: np.ndarray, n_count: int) -> None:
        if self._direct:
            kernels.reset_scratch(self._scratch(), n_id, n_count)
        else:
            table, shift = self._table()
            kernels.clear_table(self._scratch(), self._own[0], table, shift, n_id, n_count, self._local.in_table)
            self._local.in_table = 0

    def sample(self, seeds: np.ndarray, seed: int, variates: tuple[int, int] | None = None) -> SampleOutput:
        """Sample around distinct global `seeds` with the streams of `seed`; "labor" draws its variates from
        `variates` (a seed and a shift shared by batches, `sampling.labor.window`) where given."""
        seeds = self._seeds(seeds)
        n_id = self._empty(max(16, len(seeds) * 4))
        local, n_count = self._map(seeds, n_id, 0)
        if n_count != len(seeds):
            self._clear(n_id, n_count)
            raise ValueError("seed nodes must be distinct")
        rows, cols, types, degrees, means, weights = [], [], [], [], [], []
        labor = self.method == "labor"
        num_nodes, num_edges = [n_count], []
        t = getattr(self.source, "num_etypes", 1)
        f_lo, f_hi = 0, n_count
        try:
            for hop, fanout in enumerate(self.fanouts):
                counts, nbrs, mean_over, weight = draw_hop(self, n_id[f_lo:f_hi], fanout, hop, seed, variates)
                means.append(mean_over)  # None but for "labor"
                weights.append(weight)  # None but for LABOR-i
                if n_count + len(nbrs) > len(n_id):
                    n_id = self._buffer(max(2 * len(n_id), n_count + len(nbrs)), n_id, n_count)
                src, n_count = self._map(nbrs, n_id, n_count)
                rows.append(src)
                degrees.append(counts if t == 1 else counts.reshape(-1, t).sum(1))
                cols.append(self._targets(f_lo, f_hi, t, counts))
                if t > 1:
                    types.append(np.repeat(np.tile(np.arange(t, dtype=np.int64), f_hi - f_lo), counts))
                num_nodes.append(n_count - f_hi)
                num_edges.append(len(nbrs))
                f_lo, f_hi = f_hi, n_count
        finally:
            self._clear(n_id, n_count)
        cat = self._concat
        return SampleOutput(n_id=self._buffer(n_count, n_id, n_count), row=cat(rows), col=cat(cols),
                            batch_size=len(seeds), num_sampled_nodes=num_nodes, num_sampled_edges=num_edges,
                            edge_type=cat(types) if t > 1 else None, in_degree=cat(degrees),
                            mean_over=cat(means) if labor else None,
                            edge_weight=cat(weights) if labor and self.iterations and weights else None)

    # The batch's arrays: numpy here; `sampling.device_sampler.DeviceSampler` keeps them on its device.
    def _seeds(self, seeds: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(seeds, dtype=np.int64)

    def _buffer(self, size: int, old: np.ndarray, n_count: int) -> np.ndarray:
        out = self._empty(size)
        out[:n_count] = old[:n_count]
        return out

    def _empty(self, size: int) -> np.ndarray:
        return np.empty(size, dtype=np.int64)

    def _targets(self, f_lo: int, f_hi: int, t: int, counts: np.ndarray) -> np.ndarray:
        return np.repeat(np.arange(f_lo, f_hi, dtype=np.int64).repeat(t), counts)

    def _concat(self, parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else self._empty(0)

    def sample_from_edges(self, src: np.ndarray, dst: np.ndarray, seed: int,
                          variates: tuple[int, int] | None = None) -> SampleOutput:
        """Sample around both endpoints of the pairs; `edge_label_index` holds them in batch-local ids (PyG's
        LinkNeighborLoader layout)."""
        ends = np.concatenate([np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)])
        nodes = np.unique(ends)
        out = self.sample(nodes, seed, variates)
        out.edge_label_index = np.searchsorted(nodes, ends).reshape(2, -1)
        return out
