"""Partition-aware hops: own targets are sampled from the rank's CSR, remote targets by their owners.

Per hop, the frontier is grouped by owner and three all-to-alls run over `comm` (ids out; counts and
neighbour ids back). Every rank takes part in every hop, also with nothing to ask, so nothing deadlocks.
The owner draws with the requester's seed and the kernels seed per node id, so the result equals what one
process holding the whole graph would draw.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mpignn.mpi import alltoallv
from mpignn.sampling.neighbor import LocalHops

__all__ = ["DistributedHops", "owner_of", "group_by_owner"]


def owner_of(gids: np.ndarray, part_offsets: np.ndarray) -> np.ndarray:
    """Owning rank of each global id (parts own contiguous id ranges)."""
    return np.searchsorted(part_offsets, gids, side="right") - 1


def group_by_owner(gids: np.ndarray, part_offsets: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray,
                                                                                    np.ndarray]:
    """(owner of each id, a stable order that groups ids by owner, ids per owner): the send layout of an
    all-to-all request."""
    owner = owner_of(gids, part_offsets)
    return owner, np.argsort(owner, kind="stable"), np.bincount(owner, minlength=size).astype(np.int64)


def _place(out: np.ndarray, out_offsets: np.ndarray, positions: np.ndarray, counts: np.ndarray,
           values: np.ndarray) -> None:
    """Copy consecutive segments (`counts` long) of `values` to where targets `positions` start in `out`."""
    if len(values) == 0:
        return
    src_start = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=src_start[1:])
    shift = np.repeat(out_offsets[positions] - src_start, counts)
    out[np.arange(len(values), dtype=np.int64) + shift] = values


class DistributedHops:
    """A HopSource over all parts. Collective over `comm`: every rank must sample the same number of hops
    per batch, in the same order."""

    def __init__(self, comm: Any, local: LocalHops, part_offsets: np.ndarray) -> None:
        self.comm = comm
        self.local = local
        self.part_offsets = np.asarray(part_offsets, dtype=np.int64)
        self.bytes_received = 0

    def sample(self, gids: np.ndarray, fanout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        comm, rank = self.comm, self.comm.rank
        owner, order, send_counts = group_by_owner(gids, self.part_offsets, comm.size)
        own_pos = order[owner[order] == rank]
        remote_pos = order[owner[order] != rank]
        send_counts[rank] = 0  # own targets are sampled here, not sent
        seeds = np.empty(comm.size, dtype=np.int64)
        comm.Allgather(np.array([seed], dtype=np.int64), seeds)
        asked, asked_counts = alltoallv(comm, gids[remote_pos], send_counts)
        # Answer each requesting rank with its own seed.
        answers_c, answers_n, per_src_total = [], [], np.zeros(comm.size, dtype=np.int64)
        start = 0
        for src in range(comm.size):
            seg = asked[start:start + asked_counts[src]]
            start += asked_counts[src]
            c, n = self.local.sample(seg, fanout, int(seeds[src]))
            answers_c.append(c)
            answers_n.append(n)
            per_src_total[src] = len(n)
        back_counts, _ = alltoallv(comm, np.concatenate(answers_c), asked_counts)
        back_nbrs, _ = alltoallv(comm, np.concatenate(answers_n), per_src_total)
        self.bytes_received += 8 * (len(asked) + len(back_counts) + len(back_nbrs))
        own_counts, own_nbrs = self.local.sample(gids[own_pos], fanout, seed)
        counts = np.empty(len(gids), dtype=np.int64)
        counts[own_pos] = own_counts
        counts[remote_pos] = back_counts
        offsets = np.zeros(len(gids) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        nbrs = np.empty(offsets[-1], dtype=np.int64)
        _place(nbrs, offsets, own_pos, own_counts, own_nbrs)
        _place(nbrs, offsets, remote_pos, back_counts, back_nbrs)
        return counts, nbrs
