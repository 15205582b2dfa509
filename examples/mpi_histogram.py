"""A non-GNN HPC program on mpignn.mpi: prepare a data file once, split the work, reduce the result.

    mpirun -np 4 python examples/mpi_histogram.py --data /tmp/samples.npy --count 10000000

Rank 0 writes the input file if it is missing (the others wait for its ready signal, or its error), every
rank histograms its ceiling-division share of the rows through a memory map, and the counts are summed.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from mpignn.mpi import allreduce_sum, ceil_split, print0, root_first, run_main, whoami, world


def make_samples(path: str, count: int) -> None:
    rng = np.random.default_rng(0)
    tmp = f"{path}.tmp-{os.getpid()}.npy"
    np.save(tmp, rng.normal(size=count).astype(np.float32))
    os.replace(tmp, path)  # readers see the whole file or none


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="samples.npy", help="input file (.npy), written by rank 0 if missing")
    parser.add_argument("--count", type=int, default=1_000_000, help="samples to write when creating --data")
    parser.add_argument("--bins", type=int, default=8)
    args = parser.parse_args(argv)
    comm, topo = world(), whoami()
    with root_first(comm, what=f"writing {args.data}") as first:
        if first and not os.path.exists(args.data):
            make_samples(args.data, args.count)
    samples = np.load(args.data, mmap_mode="r", allow_pickle=False)
    mine = ceil_split(samples, topo.world_size, topo.rank)
    counts, edges = np.histogram(mine, bins=args.bins, range=(-4.0, 4.0))
    total = allreduce_sum(comm, counts)
    print0(f"{len(samples)} samples on {topo.world_size} ranks ({topo.num_hosts} hosts); histogram:", rank=topo.rank)
    for lo, hi, c in zip(edges[:-1], edges[1:], total):
        print0(f"  [{lo:+.1f}, {hi:+.1f}) {int(c):>10d}", rank=topo.rank)
    print0(f"counted {int(total.sum())} of {len(samples)} (the rest fall outside the range)", rank=topo.rank)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
