"""Cooperative mini-batches: the ranks sample one global batch together, and every sampled node is kept,
sampled and computed by its owner only.

With independent mini-batches each rank samples around its share of the seeds and computes every row its
neighbourhoods reach, so rows that several ranks reach are computed on each of them (`python -m
mpignn.bench.floor`). Here a hop's frontier is the rank's own nodes first reached at the previous hop by any
rank: the owner samples them from its own CSR (no structure travels) and the sources it finds go to their
owners, who keep the ones the batch has not reached yet. So each node enters the batch once, at the hop one
process holding the whole graph would reach it, and draws the neighbours that process would draw (the kernels
seed per node id and hop, and every rank uses the step's shared seed). Layer by layer, the rows of remote
sources then cross from their owners (`mpignn.exchange.halo`).

No torch. Collective over the sampler's communicator: every rank samples every step.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from mpignn.mpi import allreduce_sum, alltoallv
from mpignn.partition.format import owner_of
from mpignn.sampling import kernels
from mpignn.sampling.neighbor import Fanout, LocalHops, SampleOutput

__all__ = ["CooperativeSampler", "LayerPlan", "union_rows"]


@dataclass
class LayerPlan:
    """One layer's exchange on this rank. The layer reads a table of this rank's rows of the previous layer
    (its own batch nodes, `n_own` of them, depth order) followed by the rows other ranks send it.

    `src`: each edge's source as a row of that table (edges as the batch lists them, this layer's prefix);
    `send_idx`: which own rows go to other ranks, grouped by destination, `send_counts` per rank;
    `recv_counts`: rows arriving from each rank (appended after the own rows in rank order)."""

    src: np.ndarray
    send_idx: np.ndarray
    send_counts: np.ndarray
    recv_counts: np.ndarray
    n_own: int


class CooperativeSampler:
    """Sample `len(fanouts)` hops around this rank's seeds (its own nodes) as part of one batch of all ranks.

    The result is a `SampleOutput` of this rank's own batch nodes only (`n_id`, depth order, `num_sampled_nodes`
    per depth), their in-edges of each hop (`col`: target rows; `row`: the first layer's source rows, see
    `LayerPlan.src`) and `halo`: a `LayerPlan` per layer. Counters: `bytes_received` (ids), `halo_bytes` (rows,
    added by the exchange)."""

    cooperative = True

    def __init__(self, comm: Any, local: LocalHops, part_offsets: np.ndarray, fanouts: Sequence[Fanout],
                 rows: Any = None) -> None:
        if local.num_etypes != 1:
            raise ValueError("cooperative mini-batches sample homogeneous graphs")
        self.comm, self.source, self.rows = comm, local, rows  # rows: the transport layers' rows travel by
        self.part_offsets = np.asarray(part_offsets, dtype=np.int64)
        self.lo, self.n_own = int(local.lo), len(local.rowptr) - 1
        self.num_nodes = int(self.part_offsets[-1])
        self.fanouts = list(fanouts)
        self.bytes_received = 0
        self.halo_bytes = 0
        self._local = threading.local()

    def _mark(self) -> np.ndarray:
        """Per own node: its row in the current batch, -1 when not in it (part-sized; per thread)."""
        mark = getattr(self._local, "mark", None)
        if mark is None:
            mark = self._local.mark = np.full(self.n_own, -1, dtype=np.int64)
        return mark

    def _ask_owners(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Collective: sorted distinct `ids` to their owners -> (ids each owner got, grouped by asker; counts
        per asker; counts sent to each owner)."""
        counts = np.bincount(owner_of(ids, self.part_offsets), minlength=self.comm.size).astype(np.int64)
        got, got_counts = alltoallv(self.comm, ids, counts)
        self.bytes_received += 8 * len(got)
        return got, got_counts, counts

    def sample(self, seeds: np.ndarray, seed: int) -> SampleOutput:
        """Collective: sample around `seeds` (distinct global ids this rank owns) with the step's `seed`, which
        must be the same on every rank."""
        seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        lo, hi = self.lo, self.lo + self.n_own
        if len(seeds) and (seeds.min() < lo or seeds.max() >= hi):
            raise ValueError("cooperative seeds must be nodes this rank owns")
        if len(np.unique(seeds)) != len(seeds):
            raise ValueError("seed nodes must be distinct")
        mark = self._mark()
        own, n = self._add(np.empty(max(16, 4 * len(seeds)), dtype=np.int64), mark, seeds, 0)
        try:
            depth_counts, degrees, targets, sources = [n], [], [], []
            f_lo, f_hi = 0, n
            for hop, fanout in enumerate(self.fanouts):
                counts, nbrs = self.source.sample(own[f_lo:f_hi], fanout, kernels.mix_seed(seed, hop))
                degrees.append(counts)
                targets.append(np.repeat(np.arange(f_lo, f_hi, dtype=np.int64), counts))
                sources.append(nbrs)
                got = self._ask_owners(np.unique(nbrs))[0]  # each owner keeps the ones new to the batch
                fresh = np.unique(got)
                fresh = fresh[mark[fresh - lo] < 0]
                own, n = self._add(own, mark, fresh, n)
                depth_counts.append(len(fresh))
                f_lo, f_hi = f_hi, n
            edges = [len(s) for s in sources]
            src = np.concatenate(sources) if sources else _EMPTY
            plans = [self._plan(src[:sum(edges[:keep])], mark, sum(depth_counts[:keep + 1]))
                     for keep in range(len(self.fanouts), 0, -1)]
            n_id = own[:n].copy()
        finally:
            mark[own[:n] - lo] = -1
        return SampleOutput(n_id=n_id, row=plans[0].src if plans else _EMPTY,
                            col=np.concatenate(targets) if targets else _EMPTY, batch_size=len(seeds),
                            num_sampled_nodes=depth_counts, num_sampled_edges=edges,
                            in_degree=np.concatenate(degrees) if degrees else _EMPTY, halo=plans)

    def _add(self, own: np.ndarray, mark: np.ndarray, ids: np.ndarray, n: int) -> tuple[np.ndarray, int]:
        """Append own `ids` (distinct, new) to the batch's own rows; returns (the rows' array, their count)."""
        if n + len(ids) > len(own):
            grown = np.empty(max(2 * len(own), n + len(ids)), dtype=np.int64)
            grown[:n] = own[:n]
            own = grown
        own[n:n + len(ids)] = ids
        mark[ids - self.lo] = np.arange(n, n + len(ids), dtype=np.int64)
        return own, n + len(ids)

    def _plan(self, src: np.ndarray, mark: np.ndarray, n_own: int) -> LayerPlan:
        """Collective: a layer whose edges have sources `src` (global ids) and whose own rows are the first
        `n_own` of the batch: the remote sources are asked of their owners, who answer with their rows."""
        mine = (src >= self.lo) & (src < self.lo + self.n_own)
        index = np.empty(len(src), dtype=np.int64)
        index[mine] = mark[src[mine] - self.lo]
        remote = np.unique(src[~mine])  # sorted: grouped by owner, in rank order
        index[~mine] = n_own + np.searchsorted(remote, src[~mine])
        asked, asked_counts, want_counts = self._ask_owners(remote)
        send_idx = mark[asked - self.lo]
        if len(send_idx) and (send_idx.min() < 0 or send_idx.max() >= n_own):
            raise RuntimeError("cooperative batch: a rank asked for a row this layer does not compute")
        return LayerPlan(src=index, send_idx=send_idx, send_counts=asked_counts, recv_counts=want_counts,
                         n_own=n_own)


def union_rows(comm: Any, part_offsets: np.ndarray, n_id: np.ndarray, num_sampled_nodes: Sequence[int]) -> list[int]:
    """Collective: the distinct nodes of all ranks' batches at each layer (0: the input rows; layer j: the
    targets it computes, nodes of depth <= hops - j), counted by their owners: what one process computing the
    union of the ranks' batches would compute. For independent mini-batches' `redundancy`."""
    hops = len(num_sampled_nodes) - 1
    counts = []
    for layer in range(hops + 1):
        ids = np.unique(n_id[:int(sum(num_sampled_nodes[:hops + 1 - layer]))])
        sizes = np.bincount(owner_of(ids, part_offsets), minlength=comm.size).astype(np.int64)
        got = alltoallv(comm, ids, sizes)[0]
        counts.append(len(np.unique(got)))
    return [int(c) for c in allreduce_sum(comm, counts)]


_EMPTY = np.empty(0, dtype=np.int64)
