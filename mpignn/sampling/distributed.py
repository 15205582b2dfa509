"""Partition-aware hops: own targets are sampled from the rank's CSR, remote targets by their owners.

Four collectives a hop whatever the edge types; every rank takes part in every hop, also with nothing to ask,
so nothing deadlocks. The owner draws with the requester's seed, so the result equals one process's.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mpignn.mpi import alltoallv, segment_starts
from mpignn.partition.format import group_by_owner
from mpignn.sampling.neighbor import Fanout, LocalHops

__all__ = ["DistributedHops"]


class DistributedHops:
    """A HopSource over all parts. Collective over `comm`: every rank must sample the same number of hops
    per batch, in the same order."""

    def __init__(self, comm: Any, local: LocalHops, part_offsets: np.ndarray) -> None:
        self.comm = comm
        self.local = local
        self.part_offsets = np.asarray(part_offsets, dtype=np.int64)
        self.bytes_received = 0
        self.num_etypes = local.num_etypes

    def counters(self) -> dict[str, float]:
        """The structure fetched from owners so far (`run_epoch` diffs it per epoch)."""
        return {"remote_structure_bytes": self.bytes_received}

    def sample(self, gids: np.ndarray, fanout: Fanout, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return self._hop(gids, fanout, [seed], self.local.sample)[:2]

    def sample_labor(self, gids: np.ndarray, fanout: Fanout, seed: int,
                     shift: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._hop(gids, fanout, [seed, shift], self.local.sample_labor)

    def _hop(self, gids: np.ndarray, fanout: Fanout, header: list[int],
             draw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        comm, rank, size, t = self.comm, self.comm.rank, self.comm.size, self.num_etypes
        labor = len(header) > 1
        owner, order, send_counts = group_by_owner(gids, self.part_offsets, size)
        mine = owner[order] == rank
        send_counts[rank] = 0  # own targets are sampled here, not sent
        # Out: [seed, (labor: shift,) ids...] to each owner. Back: [counts..., (labor: denominators...,) nbrs...].
        asks = send_counts > 0
        out = np.insert(gids[order[~mine]], np.repeat(segment_starts(send_counts)[asks], len(header)),
                        np.tile(header, int(asks.sum())))
        asked, asked_counts = alltoallv(comm, out, np.where(asks, send_counts + len(header), 0))
        answers, answer_counts = [], np.zeros(size, dtype=np.int64)
        for src, start in zip(range(size), segment_starts(asked_counts)):
            if asked_counts[src]:
                answer = draw(asked[start + len(header):start + asked_counts[src]], fanout,
                              *(int(v) for v in asked[start:start + len(header)]))
                answers += [answer[0], *answer[2:], answer[1]]  # counts, (denominators,) neighbours
                answer_counts[src] = sum(len(a) for a in answer)
        back, back_from = alltoallv(comm, np.concatenate(answers) if answers else _EMPTY, answer_counts)
        self.bytes_received += 8 * (len(asked) + len(back))
        # Each owner's answer in `order`, this rank's own draw in its place: the targets grouped by owner.
        by_owner: list[tuple] = []
        for dest, start in zip(range(size), segment_starts(back_from)):
            asked_here = int(send_counts[dest]) * t  # a count per asked id and edge type
            head = 2 * asked_here if labor else asked_here  # labor: a denominator per id after the counts
            by_owner.append((back[start:start + asked_here], back[start + head:start + back_from[dest]],
                             back[start + asked_here:start + head]))
        by_owner[rank] = draw(gids[order[mine]], fanout, *header)
        counts = np.empty((len(gids), t), dtype=np.int64)
        counts[order] = np.concatenate([part[0] for part in by_owner]).reshape(-1, t)
        per_target = counts.sum(1)
        first = np.empty(len(gids), dtype=np.int64)  # where each target's neighbours start in the answers
        first[order] = segment_starts(per_target[order])
        at = np.arange(int(per_target.sum()), dtype=np.int64) + np.repeat(first - segment_starts(per_target),
                                                                          per_target)
        nbrs = np.concatenate([part[1] for part in by_owner])[at]
        if not labor:
            return counts.reshape(-1), nbrs, None
        mean_over = np.empty(len(gids), dtype=np.int64)  # homogeneous: one per target
        mean_over[order] = np.concatenate([part[2] for part in by_owner])
        return counts.reshape(-1), nbrs, mean_over

_EMPTY = np.empty(0, dtype=np.int64)
