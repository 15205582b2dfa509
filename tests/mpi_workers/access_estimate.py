"""The access estimate on 2 ranks against the old formula (one dense propagation over the whole graph), and
rank 0's traced peak while it runs: "exact" on a skewed 3000-node graph, "memory" on a 4M-node graph where
rank 0 owns 2000 nodes with 500k in-edges from 5000 remote ones (the old code counted them over all 4M)."""
import sys
import tracemalloc

import numpy as np

from mpignn.mpi import run_main, world
from mpignn.sampling.access import access_frequency
from mpignn.sampling.neighbor import LocalHops


def reference(rowptr, col, seeds, fanouts, batch):
    """The estimate for `seeds` from dense arrays over every node of the graph (the formula before)."""
    n, deg = len(rowptr) - 1, np.diff(rowptr)
    dst, mass, visits, reached = np.repeat(np.arange(n), deg), np.zeros(n), np.zeros(n), np.zeros(n, bool)
    mass[np.unique(seeds)] = 1.0
    for f in fanouts:
        share = mass if f < 0 else mass * np.minimum(1.0, f / np.maximum(deg, 1))
        hit = np.bincount(col, weights=(mass > 0)[dst], minlength=n) > 0
        mass = np.bincount(col, weights=share[dst], minlength=n)
        visits, reached = visits + mass, reached | hit
    if not len(seeds):
        return np.empty(0, dtype=np.int64), np.empty(0)
    ids = np.flatnonzero(reached)
    return ids, -(-len(seeds) // batch) * -np.expm1(-visits[ids] * (min(batch, len(seeds)) / len(seeds)))


def main(mode: str) -> None:
    comm = world()
    rng = np.random.default_rng(3)
    if mode == "exact":
        n, offsets, fanouts = 3000, np.array([0, 1400, 3000]), [5, 3, -1]
        src = (rng.pareto(1.5, 30_000) * 50).astype(np.int64) % n  # skewed: some nodes on many paths
        dst = np.sort(rng.integers(0, n, 30_000))
        seeds = rng.choice(n, 900, replace=False)[comm.rank::2]
    else:
        n, offsets, fanouts = 4_000_000, np.array([0, 2000, 4_000_000]), [-1, 2]
        dst, src = np.repeat(np.arange(2000), 250), 2000 + rng.integers(0, 5000, 500_000)
        seeds = np.arange(2000) if comm.rank == 0 else np.empty(0, dtype=np.int64)
    rowptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
    lo, hi = int(offsets[comm.rank]), int(offsets[comm.rank + 1])
    local = LocalHops(rowptr[lo:hi + 1] - rowptr[lo], src[rowptr[lo]:rowptr[hi]], lo)
    tracemalloc.start()
    ids, freq = access_frequency(comm, local, offsets, seeds, fanouts, 128)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    want_ids, want = reference(rowptr, src, seeds, fanouts, 128)
    assert np.array_equal(ids, want_ids), (len(ids), len(want_ids))
    assert np.allclose(freq, want, rtol=1e-12, atol=0), np.abs(freq - want).max()
    print(f"rank={comm.rank} reached={len(ids)} peak={peak / 2**20:.1f}MiB nodes={n}", flush=True)
    if mode == "memory" and comm.rank == 0:  # the old code's dense sum and count over every node: 16 bytes each
        assert peak < 12 * n, f"rank 0 traced {peak / 2**20:.1f} MiB, not less than 12 bytes x {n:,} nodes"
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1]))
