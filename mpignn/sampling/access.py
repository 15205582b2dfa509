"""How often sampling will fetch each node's features: an analytic estimate (SALIENT++'s access analysis).

Expected visits propagate hop by hop from the training seeds (each in-neighbour drawn with probability
min(1, f/d)), each owner for its nodes. Memory follows the part, never the global node count.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mpignn.mpi import alltoallv, segment_starts
from mpignn.partition.format import group_by_owner
from mpignn.sampling.neighbor import LocalHops

__all__ = ["access_frequency"]

# Edges spread at a time: a hop spans all the part's edges, and glibc (tuned by `mpignn.launch.allocator.tune_allocator`)
# keeps freed memory, so whole-hop arrays would raise the process's peak for the rest of the run.
_CHUNK_EDGES = 1 << 20


def access_frequency(comm: Any, local: LocalHops, part_offsets: np.ndarray, seeds: np.ndarray,
                     fanouts: Sequence[int], batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Collective over `comm` (every rank, once per hop, also with no seeds): return (sorted global ids of every
    node reachable from this rank's `seeds`, the expected batches of one epoch that fetch each).

    A batch fetches v once if it visits it at all: with Poisson visits, in 1 - exp(-visits per batch) of them.
    """
    offsets = np.asarray(part_offsets, dtype=np.int64)
    own_range = int(offsets[comm.rank]), int(offsets[comm.rank + 1])
    ids = np.unique(np.asarray(seeds, dtype=np.int64))
    mass = np.ones(len(ids))
    reached_ids, reached_mass = [], []
    for fanout in fanouts:
        ids, mass = _hop(comm, local, offsets, ids, mass, int(fanout), own_range)
        reached_ids.append(ids)
        reached_mass.append(mass)
    if not reached_ids or len(seeds) == 0:
        return np.empty(0, dtype=np.int64), np.empty(0)
    ids, visits = _sum_by_id(np.concatenate(reached_ids), np.concatenate(reached_mass), own_range)
    steps = -(-len(seeds) // batch_size)
    return ids, steps * -np.expm1(-visits * (min(batch_size, len(seeds)) / len(seeds)))


def _hop(comm: Any, local: LocalHops, offsets: np.ndarray, ids: np.ndarray, mass: np.ndarray, fanout: int,
         own_range: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Collective: the visits one hop further; remote frontier nodes are spread by their owners."""
    owner, order, counts = group_by_owner(ids, offsets, comm.size)
    own = owner == comm.rank
    nbrs, weight = _spread_sum(local, ids[own], mass[own], fanout, own_range)
    remote = order[~own[order]]
    counts[comm.rank] = 0
    asked, asked_counts = alltoallv(comm, ids[remote], counts)
    asked_mass, _ = alltoallv(comm, mass[remote], counts)
    answers = [_spread_sum(local, asked[a:a + n], asked_mass[a:a + n], fanout, own_range)
               for a, n in zip(segment_starts(asked_counts), asked_counts)]
    answer_counts = np.array([len(a_ids) for a_ids, _ in answers], dtype=np.int64)
    got_ids, _ = alltoallv(comm, np.concatenate([a_ids for a_ids, _ in answers]), answer_counts)
    got_mass, _ = alltoallv(comm, np.concatenate([a_mass for _, a_mass in answers]), answer_counts)
    return _sum_by_id(np.concatenate([nbrs, got_ids]), np.concatenate([weight, got_mass]), own_range)


def _spread_sum(local: LocalHops, gids: np.ndarray, mass: np.ndarray, fanout: int,
                own_range: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    rows = gids - local.lo
    ends = np.cumsum(local.rowptr[rows + 1] - local.rowptr[rows])
    total = int(ends[-1]) if len(ends) else 0
    if total <= _CHUNK_EDGES:
        return _sum_by_id(*_spread(local, gids, mass, fanout), own_range)
    cuts = [0, *np.searchsorted(ends, np.arange(_CHUNK_EDGES, total, _CHUNK_EDGES)).tolist(), len(gids)]
    parts = [_sum_by_id(*_spread(local, gids[a:b], mass[a:b], fanout), own_range) for a, b in zip(cuts, cuts[1:])]
    return _sum_by_id(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), own_range)


def _spread(local: LocalHops, gids: np.ndarray, mass: np.ndarray, fanout: int) -> tuple[np.ndarray, np.ndarray]:
    """(in-neighbours of own `gids`, the visits each receives: m * min(1, fanout / d))."""
    rows = gids - local.lo
    start = local.rowptr[rows]
    deg = local.rowptr[rows + 1] - start
    share = mass if fanout < 0 else mass * np.minimum(1.0, fanout / np.maximum(deg, 1))
    total = int(deg.sum())
    first = np.cumsum(deg) - deg  # where each target's neighbours start in the output
    idx = np.arange(total, dtype=np.int64)
    idx += np.repeat(start - first, deg)  # in place: one edge-sized array less at the peak
    return local.col[idx], np.repeat(share, deg)


def _sum_by_id(ids: np.ndarray, values: np.ndarray, own_range: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct ids, summed values). Own ids are counted densely when many, others by a sort: no array
    is sized by the global node count (docs/benchmarks.md). Sums equal one global bincount's on either path."""
    lo, hi = own_range
    rel = ids - lo
    own = rel.view(np.uint64) < hi - lo  # one compare: ids below the part wrap round to huge
    if own.all():
        return _sum_own(rel, values, lo, hi)
    if own.any():
        own_ids, own_sums = _sum_own(rel[own], values[own], lo, hi)
        far_mask = ~own
        ids, values = ids[far_mask], values[far_mask]
    else:  # no copies: a hop's answers from other ranks are often all remote
        own_ids, own_sums = ids[:0], values[:0]
    del rel, own
    far, far_inverse = np.unique(ids, return_inverse=True)
    far_sums = np.bincount(far_inverse, weights=values, minlength=len(far))
    cut = int(np.searchsorted(far, lo))  # remote ids below the part, then above it
    return (np.concatenate([far[:cut], own_ids, far[cut:]]),
            np.concatenate([far_sums[:cut], own_sums, far_sums[cut:]]))


def _sum_own(rel: np.ndarray, values: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    if len(rel) * 8 >= hi - lo:
        sums = np.bincount(rel, weights=values, minlength=hi - lo)
        hit = np.zeros(hi - lo, dtype=bool)
        hit[rel] = True
        keep = np.flatnonzero(hit)
        return keep + lo, sums[keep]
    uniq, inverse = np.unique(rel, return_inverse=True)
    return uniq + lo, np.bincount(inverse, weights=values, minlength=len(uniq))
