"""Link metrics on N ranks through real MPI: every rank's summary equals the metrics of all pairs on one
process, with the ring of negatives in small chunks (argv[1]) and in the default ones, and each rank's
traced peak in `summary` stays under what gathering every score and label took (16 bytes a scored pair) on
3 ranks or more."""
import sys
import tracemalloc

import numpy as np

from rank_sum_auc import auc
from mpignn.tasks.link_metrics import LinkScores, global_auc, positive_ranks
from mpignn.mpi import run_main, world


def main(chunk: str) -> None:
    comm = world()
    rng = np.random.default_rng(11)  # the same pairs on every rank; each scores its own share
    num_pos, tails = 120_000, 3
    pos = np.round(rng.standard_normal(num_pos) + 0.5, 2)
    fixed, tail = np.round(rng.standard_normal(num_pos), 2), np.round(rng.standard_normal((num_pos, tails)), 2)
    mine = np.array_split(np.arange(num_pos), comm.size)[comm.rank]  # even shares (uneven: tests/test_links.py)
    scores = LinkScores(hits_k=3)
    for batch in np.array_split(mine, 4):
        k = len(batch)
        scores.add(np.concatenate([pos[batch], fixed[batch], tail[batch].reshape(-1)]),
                   np.concatenate([np.ones(k), np.zeros(k + k * tails)]), k, tails)
    labels = np.concatenate([np.ones(num_pos), np.zeros(num_pos)])
    want = auc(np.concatenate([pos, fixed]), labels)
    small = global_auc(comm, np.concatenate([pos[mine], fixed[mine]]),
                       np.concatenate([np.ones(len(mine)), np.zeros(len(mine))]), chunk=int(chunk))
    assert small == want, (small, want)
    tracemalloc.start()
    out = scores.summary(comm)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    ranks = positive_ranks(pos, tail)
    assert out["auc"] == want and np.isclose(out["mrr"], (1 / ranks).mean(), rtol=1e-12), (out, want)
    assert np.isclose(out["hits"], (ranks <= 3).mean(), rtol=1e-12), out
    print(f"rank={comm.rank} pairs={len(mine)} auc={out['auc']:.6f} peak={peak / 2**20:.2f}MiB", flush=True)
    gathered = 16 * 2 * num_pos
    assert comm.size < 3 or peak < gathered, f"summary traced {peak / 2**20:.2f} MiB, not under {gathered:,} bytes"
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1]))
