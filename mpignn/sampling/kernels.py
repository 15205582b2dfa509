"""Compiled sampling kernels (numba). numpy in, numpy out; no torch.

Each target's neighbours are drawn from a random stream seeded by (hop seed, target's global id), so the
result for a node does not depend on the thread, the batch order, or which rank samples it: the owner of a
remote node draws exactly what a single process would.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["sample_rows", "relabel", "reset_scratch", "mix_seed", "warm_up"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(inline="always")
def _splitmix(state):
    z = state + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def mix_seed(seed, salt):
    """A new 63-bit seed from two integers (for per-epoch, per-batch and per-hop streams)."""
    return np.int64(_splitmix(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(salt))
                    >> np.uint64(1))


@njit(cache=True, parallel=True, nogil=True)
def sample_rows(rowptr, col, rows, gids, fanout, seed):
    """Uniformly sample up to `fanout` in-neighbours of each row without replacement (all when deg <= fanout,
    all when fanout < 0).

    Args:
        rowptr, col: CSR (int64) of the rows this caller owns.
        rows: local row of each target; gids: its global id (seeds its random stream).
    Returns:
        (counts[i] = neighbours drawn for target i, neighbours concatenated in target order).
    """
    n = rows.shape[0]
    counts = np.empty(n, dtype=np.int64)
    for i in prange(n):
        deg = rowptr[rows[i] + 1] - rowptr[rows[i]]
        counts[i] = deg if fanout < 0 or deg <= fanout else fanout
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(n):
        offsets[i + 1] = offsets[i] + counts[i]
    out = np.empty(offsets[n], dtype=np.int64)
    base_seed = np.uint64(seed)
    for i in prange(n):
        start = rowptr[rows[i]]
        deg = rowptr[rows[i] + 1] - start
        o = offsets[i]
        k = counts[i]
        if k == deg:
            for j in range(deg):
                out[o + j] = col[start + j]
            continue
        # Floyd's algorithm: k distinct positions out of deg, O(k^2) with tiny k, no O(deg) scratch.
        state = _splitmix(base_seed ^ (np.uint64(gids[i]) * np.uint64(0x9E3779B97F4A7C15)))
        m = 0
        for j in range(deg - k, deg):
            state = _splitmix(state)
            t = np.int64((state >> np.uint64(11)) % np.uint64(j + 1))
            for q in range(m):
                if out[o + q] == t:
                    t = j
                    break
            out[o + m] = t
            m += 1
        for q in range(k):
            out[o + q] = col[start + out[o + q]]
    return counts, out


@njit(cache=True, nogil=True)
def relabel(nbrs, scratch, n_id, n_count):
    """Give each neighbour a batch-local index, appending unseen ones to `n_id` in first-seen order.

    `scratch` maps global id -> local index (-1 = unseen) and is cleaned by `reset_scratch` after the batch,
    so the cost follows the batch, never the graph size.
    Returns:
        (local index of each neighbour, new node count).
    """
    local = np.empty(nbrs.shape[0], dtype=np.int64)
    for i in range(nbrs.shape[0]):
        g = nbrs[i]
        v = scratch[g]
        if v < 0:
            v = n_count
            scratch[g] = v
            n_id[n_count] = g
            n_count += 1
        local[i] = v
    return local, n_count


@njit(cache=True, nogil=True)
def reset_scratch(scratch, n_id, n_count):
    for i in range(n_count):
        scratch[n_id[i]] = -1


def warm_up() -> None:
    """Compile every kernel (or load it from numba's cache) on tiny inputs."""
    one = np.zeros(1, dtype=np.int64)
    counts, nbrs = sample_rows(np.array([0, 1], dtype=np.int64), one, one, one, 1, mix_seed(0, 0))
    scratch = np.full(1, -1, dtype=np.int64)
    n_id = np.empty(2, dtype=np.int64)
    _, n = relabel(nbrs, scratch, n_id, 0)
    reset_scratch(scratch, n_id, n)
