"""Layer-neighbour sampling's compiled kernels: LABOR-0, dependent batches and LABOR-i (docs/training.md
"Layer-neighbour sampling"). Each source's variate is a function of the hop seed and its global id alone, so
every rank draws what one process would.
"""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
from numba import njit, prange

from mpignn.compiled import ensure_numba_cache_dir, read_only, serial_or_parallel
from mpignn.sampling.kernels import ARRAY_MAP_BYTES, first_seen, first_seen_mapped, splitmix

ensure_numba_cache_dir(os.path.dirname(os.path.abspath(__file__)))  # before the first cached kernel below

__all__ = ["labor_rows", "labor_importance", "importance_scales", "window", "warm_up"]

_UNIT = 1.0 / 9007199254740992.0  # 2**-53: the top 53 bits of a draw as a double in [0, 1)
_TOP = (1 << 53) - 1


@njit(inline="always")
def _draw(base, gid, shift):
    """Node `gid`'s variate in [0, 1) under hop seed `base`, rotated by `shift` (< 2**53)."""
    bits = splitmix(base ^ (np.uint64(gid) * np.uint64(0x9E3779B97F4A7C15))) >> np.uint64(11)
    return np.float64((bits + shift) & np.uint64(_TOP)) * _UNIT


def window(step: int, dependency: int) -> tuple[int, int]:
    """(the window of step `step` under `--batch-dependency` K, the shift of its variates)."""
    if dependency <= 1:
        return step, 0
    return step // dependency, (step % dependency) * ((1 << 53) // dependency)


@serial_or_parallel
def labor_rows(rowptr, col, rows, fanouts, seed, shift=0):
    """LABOR-0: row i keeps source s where s's variate (from the hop's `seed` and s's global id in `col`) is below
    `fanouts[i % len(fanouts)]` / its degree. Returns (kept per target, their global ids, denominators
    min(degree, fanout) for the unbiased mean).
    """
    n = rows.shape[0]
    kinds = fanouts.shape[0]
    counts = np.empty(n, dtype=np.int64)
    denominators = np.empty(n, dtype=np.int64)
    edges = np.zeros(n + 1, dtype=np.int64)  # where each target's edges start in `keep`
    edges[1:] = np.cumsum(rowptr[rows + 1] - rowptr[rows])
    keep = np.empty(edges[n], dtype=np.bool_)  # each edge hashed once: its verdict kept for the copy below
    base = np.uint64(seed)
    rotate = np.uint64(shift)
    for i in prange(n):
        start, end = rowptr[rows[i]], rowptr[rows[i] + 1]
        deg = end - start
        fanout = fanouts[i % kinds]
        if fanout < 0 or deg <= fanout:
            counts[i] = deg
            denominators[i] = deg
            continue
        denominators[i] = fanout
        cut = fanout / deg
        kept = 0
        for e in range(start, end):
            verdict = _draw(base, col[e], rotate) < cut
            keep[edges[i] + e - start] = verdict
            kept += verdict
        counts[i] = kept
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(counts)
    out = np.empty(offsets[n], dtype=np.int64)
    for i in prange(n):
        start, end = rowptr[rows[i]], rowptr[rows[i] + 1]
        o = offsets[i]
        whole = denominators[i] == end - start  # every neighbour: no verdicts were drawn
        for e in range(start, end):
            if whole or keep[edges[i] + e - start]:
                out[o] = col[e]
                o += 1
    return counts, out, denominators


_POW2 = np.array([2.0 ** k for k in range(64)])  # exact powers of two, for the fixed-point sums


@njit(cache=True, nogil=True, inline="always")
def fixed_point(degree):
    """The bits k a target's weights (each <= 1) are summed with as integers w * 2**k: exact, so the sum is the
    same in any order, and under 2**63 for `degree` weights."""
    k = 52
    while degree >= np.int64(1) << (63 - k):
        k -= 1
    return k


@njit(cache=True, nogil=True, inline="always")
def _saturated(weights, fanout, rest):
    """c with sum(min(1, c w)) = fanout over `weights` sorted in descending order, `rest` their sum: the j
    heaviest saturate (c w >= 1) and the others share fanout - j."""
    c = fanout / rest
    for j in range(weights.shape[0]):
        c = (fanout - j) / rest
        if c * weights[j] < 1.0 or rest <= weights[j]:
            break
        rest -= weights[j]
    return c


@serial_or_parallel
def importance_scales(ptr, inverse, pi, fanout):
    """LABOR-i's c_t per target: sum over t's edges of min(1, c_t pi_s) = fanout; inf where t keeps all.
    Exact sums (`fixed_point`) make every rank's c_t one process's and the torch-op twin's."""
    n = ptr.shape[0] - 1
    out = np.empty(n, dtype=np.float64)
    for i in prange(n):
        start, end = ptr[i], ptr[i + 1]
        deg = end - start
        if fanout < 0 or deg <= fanout:
            out[i] = np.inf
            continue
        scale = _POW2[fixed_point(deg)]
        total = np.int64(0)
        top = 0.0
        for e in range(start, end):
            w = pi[inverse[e]]
            total += np.int64(w * scale)
            top = max(top, w)
        rest = total / scale
        c = fanout / rest
        if c * top < 1.0:  # nothing saturates: the usual case, no sort
            out[i] = c
            continue
        out[i] = _saturated(-np.sort(-pi[inverse[start:end]]), fanout, rest)
    return out


@njit(cache=True, nogil=True)
def _raised(ptr, inverse, scale, pi, n_sources):
    """pi'_s = max_t min(1, c_t pi_s), as min(1, pi_s max_t c_t): the same bits (rounding is monotone) with one
    product per source instead of one per edge."""
    top = np.zeros(n_sources, dtype=np.float64)
    for i in range(ptr.shape[0] - 1):
        c = scale[i]
        for e in range(ptr[i], ptr[i + 1]):
            s = inverse[e]
            if c > top[s]:
                top[s] = c
    return np.minimum(1.0, pi * top)


@njit(cache=True, nogil=True)
def _variates(base, gids, shift):
    out = np.empty(gids.shape[0], dtype=np.float64)
    for i in range(gids.shape[0]):
        out[i] = _draw(base, gids[i], shift)
    return out


@njit(cache=True, nogil=True)
def _importance_draw(ptr, nbrs, inverse, scale, pi, r, fanout, normalise):
    """Keep edge (t, s) where r_s < min(1, c_t pi_s): (kept per target, ids, weights, denominators)."""
    n = ptr.shape[0] - 1
    counts = np.zeros(n, dtype=np.int64)
    denominators = np.empty(n, dtype=np.int64)
    out = np.empty(nbrs.shape[0], dtype=np.int64)
    weight = np.empty(nbrs.shape[0], dtype=np.float32)
    o = 0
    for i in range(n):
        deg = ptr[i + 1] - ptr[i]
        whole = fanout < 0 or deg <= fanout
        denominators[i] = deg if whole else fanout
        q = 1.0 if whole else fanout / deg
        first, total = o, 0.0
        for e in range(ptr[i], ptr[i + 1]):
            s = inverse[e]
            p = min(1.0, scale[i] * pi[s])
            if r[s] < p:
                out[o] = nbrs[e]
                weight[o] = q / p
                total += q / p
                o += 1
                counts[i] += 1
        if normalise and o > first:
            for j in range(first, o):
                weight[j] = weight[j] * (denominators[i] / total)
    return counts, out[:o].copy(), weight[:o].copy(), denominators


def labor_importance(ptr: np.ndarray, nbrs: np.ndarray, fanout: int, seed: int, shift: int, iterations: int,
                     reduce: Any = None, num_nodes: int = -1,
                     normalise: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """LABOR-`iterations` on a hop whose targets' whole neighbourhoods `nbrs[ptr[t]:ptr[t + 1]]` are known.

    The method and its weights: docs/training.md, "Importance-sampling iterations". `normalise` (the ratio
    estimator: biased but of lower variance) trained to the better accuracy there. Cooperative batches pass
    `reduce` (collective), which maxes each source's weight over all ranks. Returns (kept per target, their ids
    in CSR order, denominators as `labor_rows`'s, float32 edge weights).
    """
    ptr = np.ascontiguousarray(ptr, dtype=np.int64)
    nbrs = np.ascontiguousarray(nbrs, dtype=np.int64)
    sources, inverse = _first_seen(nbrs, num_nodes)
    combine = reduce(sources) if reduce is not None else None
    pi = np.ones(len(sources), dtype=np.float64)
    iterations = iterations if fanout != 0 else 0  # a hop keeping nothing: no weight to raise (0 / 0 past one)
    for _ in range(iterations):
        pi = _raised(ptr, inverse, importance_scales(ptr, inverse, pi, fanout), pi, len(sources))
        if combine is not None:
            pi = combine(pi)
    scale = importance_scales(ptr, inverse, pi, fanout)
    r = _variates(np.uint64(seed), sources, np.uint64(shift))
    counts, kept, weight, denominators = _importance_draw(ptr, nbrs, inverse, scale, pi, r, fanout,
                                                          normalise and iterations > 0)
    return counts, kept, denominators, weight


_MAPS = threading.local()


def _first_seen(ids: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """`first_seen` through a per-thread node array (no probing) where that fits ARRAY_MAP_BYTES."""
    if not 0 < num_nodes <= ARRAY_MAP_BYTES // 8:
        return first_seen(ids, num_nodes)
    index_of = getattr(_MAPS, "index_of", None)
    if index_of is None or len(index_of) != num_nodes:
        index_of = _MAPS.index_of = np.full(num_nodes, -1, dtype=np.int64)
    return first_seen_mapped(ids, index_of)


def warm_up(importance: bool = False) -> None:
    """Compile (or load from cache) the kernels, `labor_rows` on read-only arrays as `LocalHops` calls it."""
    one = np.zeros(1, dtype=np.int64)
    labor_rows(*map(read_only, (np.array([0, 1], dtype=np.int64), one, one, one + 1)), 0, 0)
    if importance:
        for num_nodes in (-1, 6):  # sources through a hash table, and through a node array
            labor_importance(np.array([0, 2], dtype=np.int64), np.array([3, 5], dtype=np.int64), 1, 0, 0, 1,
                             num_nodes=num_nodes)
