"""Cooperative mini-batches: the ranks sample one global batch together, each node kept, sampled and computed
by its owner only (docs/training.md "Cooperative mini-batches").
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from mpignn.mpi import allreduce_sum, alltoallv, collectives, segment_starts
from mpignn.partition.format import group_by_owner, owner_of
from mpignn.sampling import kernels
from mpignn.sampling.neighbor import Fanout, LocalHops, SampleOutput, draw_hop

__all__ = ["CooperativeSampler", "KeptInputs", "LayerPlan", "union_rows"]


@dataclass
class LayerPlan:
    """One layer's exchange on this rank: the layer reads its `n_own` own rows, then the rows others send.

    `src`: each edge's source as a row of that table; `send_idx`: own rows to send, grouped by destination.
    Agreeing on `pieces` here spares each row exchange the collective that would otherwise agree on it."""

    src: np.ndarray
    send_idx: np.ndarray
    send_counts: np.ndarray
    recv_counts: np.ndarray
    n_own: int
    pieces: bool = False  # whether its exchanges go in pieces (MAX_COUNT), agreed by every rank
    kept: KeptInputs | None = None  # the input layer's: its exchange when rows a recent batch brought are kept


@dataclass
class KeptInputs:
    """The input layer's exchange when remote rows an earlier batch (`recent`) holds are taken from it.

    `fresh`: positions the received rows fill; `kept`: those `recent` fills, from its `slots`; `gids`, `pos`:
    this batch's sorted remote ids and positions, which later batches look up in `rows` once filled."""

    send_idx: np.ndarray
    send_counts: np.ndarray
    recv_counts: np.ndarray
    pieces: bool
    fresh: np.ndarray
    kept: np.ndarray
    slots: np.ndarray
    recent: KeptInputs | None
    gids: np.ndarray
    pos: np.ndarray
    rows: Any = None


class CooperativeSampler:
    """Sample `len(fanouts)` hops around this rank's own seeds as part of one batch of all ranks.

    Its `SampleOutput` holds this rank's own batch nodes only, and `halo`: a `LayerPlan` per layer.
    `keep_inputs` (dependent batches): remote input rows the batch before brought are not sent again. A pass's
    first batch looks up `filled_inputs` (the last filled), as the previous pass may have drawn one it never
    trained."""

    cooperative = True

    def __init__(self, comm: Any, local: LocalHops, part_offsets: np.ndarray, fanouts: Sequence[Fanout],
                 rows: Any = None, method: str = "neighbor", dependency: int = 1,
                 layer_dependency: bool = False, iterations: int = 0, keep_inputs: bool = False) -> None:
        if local.num_etypes != 1:
            raise ValueError("cooperative mini-batches sample homogeneous graphs")
        self.method = method  # "labor": each owner draws its targets by layer-neighbour sampling (same variates)
        self.dependency, self.layer_dependency = int(dependency), bool(layer_dependency)  # as NeighborSampler's
        self.iterations = int(iterations)  # LABOR-i: each source's weight is a maximum over every rank's targets
        self.comm, self.source, self.rows = comm, local, rows  # rows: the transport layers' rows travel by
        self.part_offsets = np.asarray(part_offsets, dtype=np.int64)
        self.lo, self.n_own = int(local.lo), len(local.rowptr) - 1
        self.num_nodes = int(self.part_offsets[-1])
        self.fanouts = list(fanouts)
        self.bytes_received = 0
        self.halo_bytes = 0
        self.keep_inputs = bool(keep_inputs)  # the same on every rank
        self.filled_inputs: KeptInputs | None = None  # the last batch whose input rows were filled
        self._drawn: KeptInputs | None = None  # this pass's last batch drawn
        self.input_rows = self.kept_rows = 0
        self._local = threading.local()

    def close(self) -> None:
        """Collective: free the communicator and the rows' transport (`--minibatch tune`'s probe)."""
        self.comm.Free()
        if self.rows is not None:
            self.rows.close()

    def new_pass(self) -> None:
        """The loader starts a pass: batches drawn before may never have trained."""
        self._drawn = None

    def counters(self) -> dict[str, float]:
        """Its traffic so far (`run_epoch` diffs them per epoch)."""
        return {"remote_structure_bytes": self.bytes_received, "halo_bytes": self.halo_bytes,
                "input_rows": self.input_rows, "kept_rows": self.kept_rows}

    def sample(self, seeds: np.ndarray, seed: int, variates: tuple[int, int] | None = None) -> SampleOutput:
        """Collective: sample around this rank's distinct own `seeds` with the step's `seed` (equal on all ranks)."""
        seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        lo, hi = self.lo, self.lo + self.n_own
        if len(seeds) and (seeds.min() < lo or seeds.max() >= hi):
            raise ValueError("cooperative seeds must be nodes this rank owns")
        mark = getattr(self._local, "mark", None)  # per own node: its row in the batch, else -1 (per thread)
        if mark is None:
            mark = self._local.mark = np.full(self.n_own, -1, dtype=np.int64)
        own = np.empty(max(16, 4 * len(seeds)), dtype=np.int64)
        n = kernels.relabel(seeds, mark, own, 0, lo)[1]
        try:
            if n != len(seeds):
                raise ValueError("seed nodes must be distinct")
            depth_counts, degrees, targets, sources, means, weights = [n], [], [], [], [], []
            labor = self.method == "labor"
            f_lo, f_hi = 0, n
            for hop, fanout in enumerate(self.fanouts):
                counts, nbrs, mean_over, weight = draw_hop(self, own[f_lo:f_hi], fanout, hop, seed, variates,
                                                           self._max_over_ranks)
                means.append(mean_over)  # None but for "labor"
                weights.append(weight)  # None but for LABOR-i
                degrees.append(counts)
                targets.append(np.repeat(np.arange(f_lo, f_hi, dtype=np.int64), counts))
                sources.append(nbrs)
                found = kernels.first_seen(nbrs)[0]
                mine = (found >= lo) & (found < hi)
                remote = found[~mine]
                _, order, counts = group_by_owner(remote, self.part_offsets, self.comm.size)
                got = alltoallv(self.comm, remote[order], counts)[0]
                self.bytes_received += 8 * len(got)
                if n + len(found) + len(got) > len(own):  # room for every candidate
                    own = np.concatenate([own[:n], np.empty(max(n, len(found) + len(got)), dtype=np.int64)])
                n = kernels.relabel(got, mark, own, kernels.relabel(found[mine], mark, own, n, lo)[1], lo)[1]
                depth_counts.append(n - f_hi)
                f_lo, f_hi = f_hi, n
            src = np.concatenate(sources) if sources else _EMPTY
            plans = self._plans(src, [len(e) for e in sources], depth_counts, mark)
            n_id = own[:n].copy()
        finally:
            mark[own[:n] - lo] = -1
        return SampleOutput(n_id=n_id, row=plans[0].src if plans else _EMPTY,
                            col=np.concatenate(targets) if targets else _EMPTY, batch_size=len(seeds),
                            num_sampled_nodes=depth_counts, num_sampled_edges=[len(e) for e in sources],
                            in_degree=np.concatenate(degrees) if degrees else _EMPTY, halo=plans,
                            mean_over=(np.concatenate(means) if means else _EMPTY) if labor else None,
                            edge_weight=np.concatenate(weights) if labor and self.iterations and weights else None)

    def _max_over_ranks(self, sources: np.ndarray) -> Any:
        """Collective: a function maxing each source's value over all ranks; ids go to owners once, then each
        call is two all-to-alls."""
        comm = self.comm
        _, order, sent = group_by_owner(sources, self.part_offsets, comm.size)
        asked_from, pieces = collectives.exchange_counts(comm, sent)
        asked = alltoallv(comm, sources[order], sent, asked_from, pieces)[0]
        distinct, slot = np.unique(asked, return_inverse=True)
        self.bytes_received += 8 * len(asked)

        def combine(values: np.ndarray) -> np.ndarray:
            got = alltoallv(comm, values[order], sent, asked_from, pieces)[0]
            top = np.zeros(len(distinct), dtype=np.float64)
            np.maximum.at(top, slot, got)
            back = alltoallv(comm, top[slot], asked_from, sent, pieces)[0]
            self.bytes_received += 8 * (len(got) + len(back))
            out = np.empty(len(sources), dtype=np.float64)
            out[order] = back
            return out
        return combine

    def _plans(self, src: np.ndarray, edges: list[int], depth_counts: list[int], mark: np.ndarray) -> list[LayerPlan]:
        """Collective: every layer's exchange in one request. Remote sources in first-appearance order make each
        layer's set a prefix, also per owner, so one all-to-all of ids asks for every layer at once."""
        size, hops = self.comm.size, len(edges)
        lo, hi = self.lo, self.lo + self.n_own
        code, remote, first_pos = kernels.split_sources(src, lo, hi, mark)
        owner, order, per_owner = group_by_owner(remote, self.part_offsets, size)
        within = np.empty(len(remote), dtype=np.int64)
        within[order] = np.arange(len(remote), dtype=np.int64) - np.repeat(segment_starts(per_owner), per_owner)
        prefix = [int(sum(edges[:hops - j])) for j in range(hops)]  # layer j's edge count
        reads = [int(np.searchsorted(first_pos, e)) for e in prefix]  # layer j reads remote sources [0, reads[j])
        counts = np.stack([np.bincount(owner[:r], minlength=size) for r in reads], axis=1)
        ids = remote[order]  # also the input layer's remote rows, in its table's order
        recent = None
        if self.keep_inputs:  # the batch drawn before this one in the pass, else the last one filled
            recent = self._drawn if self._drawn is not None else self.filled_inputs
        have = np.isin(ids, recent.gids) if recent is not None else np.zeros(len(ids), dtype=bool)
        # an id this rank holds goes as -1 - id: its owner then leaves it out of the input layer's exchange
        asked, asked_from = alltoallv(self.comm, np.where(have, -1 - ids, ids), per_owner)
        skip = asked < 0
        asked = np.where(skip, -1 - asked, asked)
        # With each rank's layer counts goes a flag, the same to every rank, so all agree on `pieces`: some
        # layer's exchange may move more than MAX_COUNT // size rows to or from this rank (sends bounded by
        # its own rows times the other ranks, what it could be asked for at most).
        own_rows = [int(sum(depth_counts[:hops - j + 1])) for j in range(hops)]
        big = max([int(c) for c in counts.sum(axis=0)] + [n * (size - 1) for n in own_rows], default=0)
        message = np.empty((size, hops + 1), dtype=np.int64)
        message[:, :hops], message[:, hops] = counts, big > collectives.MAX_COUNT // size
        ones = np.ones(size, dtype=np.int64)
        layer_counts = alltoallv(self.comm, message, ones, ones, False)[0]
        pieces = bool(layer_counts[:, hops].any())
        self.bytes_received += 8 * (len(asked) + layer_counts.size)
        rows = mark[asked - lo]
        if len(rows) and rows.min() < 0:
            raise RuntimeError("cooperative batch: a rank asked for a row not in the batch")
        starts = segment_starts(asked_from)
        plans = []
        for j, e in enumerate(prefix):
            n_own = own_rows[j]
            send_counts = layer_counts[:, j]
            send_idx = np.concatenate([rows[a:a + c] for a, c in zip(starts, send_counts)])
            if len(send_idx) and send_idx.max() >= n_own:
                raise RuntimeError("cooperative batch: a rank asked for a row this layer does not compute")
            recv_counts = counts[:, j].astype(np.int64)
            r = reads[j]
            index = kernels.layer_sources(code, e, n_own, segment_starts(recv_counts)[owner[:r]] + within[:r])
            plans.append(LayerPlan(src=index, send_idx=send_idx, send_counts=send_counts.astype(np.int64),
                                   recv_counts=recv_counts, n_own=n_own, pieces=pieces))
        if self.keep_inputs and plans:  # the input layer's exchange reads every remote row: all of `asked`
            by_rank = np.repeat(np.arange(size), asked_from)
            sorted_pos = np.argsort(ids, kind="stable")
            plans[0].kept = self._drawn = KeptInputs(
                send_idx=rows[~skip], send_counts=np.bincount(by_rank[~skip], minlength=size).astype(np.int64),
                recv_counts=np.bincount(owner[order][~have], minlength=size).astype(np.int64), pieces=pieces,
                fresh=np.flatnonzero(~have), kept=np.flatnonzero(have),
                slots=recent.pos[np.searchsorted(recent.gids, ids[have])] if recent is not None else _EMPTY,
                recent=recent, gids=ids[sorted_pos], pos=sorted_pos)
        return plans


def union_rows(comm: Any, part_offsets: np.ndarray, n_id: np.ndarray, num_sampled_nodes: Sequence[int]) -> list[int]:
    """Collective: the distinct nodes of all ranks' batches per layer, counted by owners (for `redundancy`)."""
    counts = []
    for depth in range(len(num_sampled_nodes), 0, -1):  # layer 0 reads nodes of every depth, the last the seeds
        ids = np.unique(n_id[:int(sum(num_sampled_nodes[:depth]))])
        sizes = np.bincount(owner_of(ids, part_offsets), minlength=comm.size).astype(np.int64)
        got = alltoallv(comm, ids, sizes)[0]
        counts.append(len(np.unique(got)))
    return [int(c) for c in allreduce_sum(comm, counts)]


_EMPTY = np.empty(0, dtype=np.int64)
