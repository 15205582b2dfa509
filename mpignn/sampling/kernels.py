"""Compiled sampling kernels (numba), numpy in and out.

Each target's neighbours are drawn from a random stream seeded by (hop seed, target's global id), so the
result for a node does not depend on the thread, the batch order, or which rank samples it: the owner of a
remote node draws exactly what a single process would.
"""
from __future__ import annotations

import os

import numpy as np
from numba import njit, prange

from mpignn.compiled import ensure_numba_cache_dir, read_only, serial_or_parallel

ensure_numba_cache_dir(os.path.dirname(os.path.abspath(__file__)))  # before the first @njit(cache=True) below

__all__ = ["ARRAY_MAP_BYTES", "sample_rows", "splitmix", "relabel", "reset_scratch", "relabel_hashed", "rehash",
           "clear_table", "mix_seed", "hashed_ids", "first_seen", "first_seen_mapped", "warm_up"]


@njit(inline="always")
def splitmix(state):
    z = state + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True)
def mix_seed(seed, salt):
    """A new 63-bit seed from two integers (for per-epoch, per-batch and per-hop streams)."""
    return np.int64(splitmix(np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(salt))
                    >> np.uint64(1))


@njit(cache=True, nogil=True)
def hashed_ids(keys, seed, n):
    """int64 [len(keys)] in [0, n) hashed from each key and `seed`: link negatives the same on any rank count."""
    out = np.empty(len(keys), dtype=np.int64)
    for i in range(len(keys)):
        out[i] = np.int64(splitmix(np.uint64(keys[i]) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed))
                          % np.uint64(n))
    return out


@serial_or_parallel
def sample_rows(rowptr, col, rows, gids, fanouts, seed):
    """Uniformly sample up to `fanouts[i % len(fanouts)]` in-neighbours of row `rows[i]` without replacement
    (< 0: all), seeded by target i's global id `gids[i]`; `fanouts` has one entry per edge type (each target a
    run of rows, `LocalHops`). Returns (neighbours drawn per target, neighbours concatenated in target order).
    """
    n = rows.shape[0]
    counts = np.empty(n, dtype=np.int64)
    kinds = fanouts.shape[0]
    for i in prange(n):
        deg = rowptr[rows[i] + 1] - rowptr[rows[i]]
        fanout = fanouts[i % kinds]
        counts[i] = deg if fanout < 0 or deg <= fanout else fanout
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(counts)
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
        state = splitmix(base_seed ^ (np.uint64(gids[i]) * np.uint64(0x9E3779B97F4A7C15)))
        m = 0
        for j in range(deg - k, deg):
            state = splitmix(state)
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
def relabel(nbrs, scratch, n_id, n_count, lo=0):
    """Give each neighbour a batch-local index, appending unseen ones to `n_id` in first-seen order.

    `scratch` (global id - `lo` -> local index, -1 = unseen) is cleaned by `reset_scratch`, so cost follows the
    batch. A cooperative batch's own nodes take it with the part's first node as `lo`. Returns (local index of
    each neighbour, new node count).
    """
    local = np.empty(nbrs.shape[0], dtype=np.int64)
    for i in range(nbrs.shape[0]):
        g = nbrs[i]
        v = scratch[g - lo]
        if v < 0:
            v = n_count
            scratch[g - lo] = v
            n_id[n_count] = g
            n_count += 1
        local[i] = v
    return local, n_count


@njit(cache=True, nogil=True)
def reset_scratch(scratch, n_id, n_count):
    for i in range(n_count):
        scratch[n_id[i]] = -1


@njit(inline="always")
def _slot(g, shift):
    return np.int64((np.uint64(g) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(shift))


@njit(cache=True, nogil=True)
def relabel_hashed(nbrs, start, local, scratch, lo, table, shift, n_id, n_count, in_table, limit):
    """`relabel` with memory that follows the part and the batch: own ids through `scratch`, others through a
    linear-probing table of 2^(64 - shift) slots. Stops once the table holds `limit` ids (the caller grows it).
    Returns (first neighbour not done, new node count, ids now in the table).
    """
    mask = (table.shape[0] >> 1) - 1
    own = scratch.shape[0]
    i = start
    while i < nbrs.shape[0]:
        g = nbrs[i]
        r = g - lo
        if r >= 0 and r < own:
            v = scratch[r]
            if v < 0:
                v = n_count
                scratch[r] = v
                n_id[n_count] = g
                n_count += 1
            local[i] = v
            i += 1
            continue
        if in_table >= limit:
            return i, n_count, in_table
        slot = _slot(g, shift)
        while True:
            key = table[2 * slot]
            if key == g:
                local[i] = table[2 * slot + 1]
                break
            if key < 0:
                table[2 * slot] = g
                table[2 * slot + 1] = n_count
                n_id[n_count] = g
                local[i] = n_count
                n_count += 1
                in_table += 1
                break
            slot = (slot + 1) & mask
        i += 1
    return i, n_count, in_table


@njit(cache=True, nogil=True)
def rehash(table, shift, n_id, n_count, lo, own):
    """Insert n_id[i] -> i for every node so far that is not an own node into an empty (larger) table."""
    mask = (table.shape[0] >> 1) - 1
    for i in range(n_count):
        g = n_id[i]
        if g >= lo and g < lo + own:
            continue
        slot = _slot(g, shift)
        while table[2 * slot] >= 0:
            slot = (slot + 1) & mask
        table[2 * slot] = g
        table[2 * slot + 1] = i


@njit(cache=True, nogil=True)
def clear_table(scratch, lo, table, shift, n_id, n_count, in_table):
    """Forget the batch; the table whole only when mostly full, so cost follows the batch after one big batch."""
    own = scratch.shape[0]
    slots = table.shape[0] >> 1
    fill = in_table * 8 >= slots
    if fill:
        table[:] = -1
    mask = slots - 1
    for i in range(n_count):
        g = n_id[i]
        if g >= lo and g < lo + own:
            scratch[g - lo] = -1
        elif not fill:
            slot = _slot(g, shift)
            while table[2 * slot] != g:  # every key is present: probe past slots emptied before
                slot = (slot + 1) & mask
            table[2 * slot] = -1


@njit(inline="always")
def _empty_table(n):
    """(keys, values, mask, shift) of an open-addressing table with at least 2n slots."""
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    return np.full(1 << bits, -1, dtype=np.int64), np.empty(1 << bits, dtype=np.int64), (1 << bits) - 1, 64 - bits


@njit(inline="always")
def _probe(keys, g, mask, shift):
    slot = _slot(g, shift)
    while keys[slot] != -1 and keys[slot] != g:
        slot = (slot + 1) & mask
    return slot


@njit(cache=True, nogil=True)
def first_seen(ids, bound=-1):
    """(distinct ids in first-occurrence order, each id's index among them): `np.unique` without the sort.
    `bound` caps the distinct count (e.g. the graph's nodes), sizing the table below a hop's edges."""
    n = ids.shape[0]
    keys, slots, mask, shift = _empty_table(n if bound < 0 else min(n, bound))
    distinct = np.empty(n if bound < 0 else min(n, bound), dtype=np.int64)
    index = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        g = ids[i]
        slot = _probe(keys, g, mask, shift)
        if keys[slot] == -1:
            keys[slot] = g
            slots[slot] = k
            distinct[k] = g
            k += 1
        index[i] = slots[slot]
    return distinct[:k], index


ARRAY_MAP_BYTES = 64 << 20
"""Largest global array map kept per thread where a hash table would do (8M nodes): `NeighborSampler`'s "auto"
relabel map, LABOR-i's sources (`sampling.labor`)."""


@njit(cache=True, nogil=True)
def first_seen_mapped(ids, index_of):
    """`first_seen` through `index_of` (one int64 per node, all -1, restored on return); ids outside it raise."""
    for i in range(ids.shape[0]):
        if ids[i] < 0 or ids[i] >= index_of.shape[0]:
            raise ValueError("first_seen_mapped: an id outside the map (a node id past the graph's)")
    distinct = np.empty(min(ids.shape[0], index_of.shape[0]), dtype=np.int64)
    index, k = relabel(ids, index_of, distinct, 0)
    reset_scratch(index_of, distinct, k)
    return distinct[:k], index


@njit(cache=True, nogil=True)
def split_sources(src, lo, hi, mark):
    """A cooperative batch's edge sources in one pass: (each edge's code: an own source's row, or -1 - k for the
    k-th distinct remote source; the distinct remote sources; each one's first edge)."""
    n = src.shape[0]
    n_remote = 0
    for i in range(n):
        if src[i] < lo or src[i] >= hi:
            n_remote += 1
    keys, slots, mask, shift = _empty_table(n_remote)
    remote = np.empty(n_remote, dtype=np.int64)
    first = np.empty(n_remote, dtype=np.int64)
    code = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        g = src[i]
        if lo <= g < hi:
            code[i] = mark[g - lo]
            continue
        slot = _probe(keys, g, mask, shift)
        if keys[slot] == -1:
            keys[slot] = g
            slots[slot] = k
            remote[k] = g
            first[k] = i
            k += 1
        code[i] = -1 - slots[slot]
    return code, remote[:k], first[:k]


@njit(cache=True, nogil=True)
def layer_sources(code, e, n_own, slot):
    """The first `e` edges' sources as rows of a layer's table: the k-th remote source at n_own + slot[k]."""
    index = np.empty(e, dtype=np.int64)
    for i in range(e):
        c = code[i]
        index[i] = c if c >= 0 else n_own + slot[-1 - c]
    return index


def warm_up() -> None:
    """Compile (or load from cache) every kernel on tiny inputs, serial or parallel by numba's thread count now."""
    one = np.zeros(1, dtype=np.int64)
    counts, nbrs = sample_rows(*map(read_only, (np.array([0, 1], dtype=np.int64), one, one, one, one + 1)),
                               mix_seed(0, 0))
    scratch = np.full(1, -1, dtype=np.int64)
    n_id = np.empty(2, dtype=np.int64)
    _, n = relabel(nbrs, scratch, n_id, 0)
    reset_scratch(scratch, n_id, n)
    table = np.full(4, -1, dtype=np.int64)
    local = np.empty(len(nbrs), dtype=np.int64)
    _, n, filled = relabel_hashed(nbrs, 0, local, scratch, 1, table, 63, n_id, 0, 0, 1)
    clear_table(scratch, 1, table, 63, n_id, n, filled)
    rehash(table, 63, n_id, n, 1, 1)
    first_seen(nbrs)
    hashed_ids(one, 0, 1)
    code, _, _ = split_sources(one, 1, 2, np.zeros(1, dtype=np.int64))
    layer_sources(code, 1, 0, one)
    relabel(one, np.full(1, -1, dtype=np.int64), np.empty(1, dtype=np.int64), 0, 0)
