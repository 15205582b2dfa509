"""NodeEmbedding over N ranks equals one process holding every row: rows pulled by the exchange, gradients
averaged at their owners, only the rows touched updated, and only remote touched rows sent."""
import sys

import numpy as np
import torch

from mpignn.exchange.embedding import NodeEmbedding
from mpignn.mpi import chunk_bounds, run_main, world

NODES, DIM = 50, 4


def batch_ids(rank: int, step: int) -> np.ndarray:
    rng = np.random.default_rng([rank, step])
    return rng.choice(NODES - 10, size=7 + rank, replace=False)  # rows 40..49 are never touched


def loss_of(rows: torch.Tensor, rank: int, step: int) -> torch.Tensor:
    coef = torch.from_numpy(np.random.default_rng([99, rank, step]).standard_normal(rows.shape).astype(np.float32))
    return (rows * coef).sum() + (rows ** 2).sum()


def main(optimizer: str) -> None:
    comm = world()
    offsets = np.array([chunk_bounds(NODES, comm.size, r)[0] for r in range(comm.size)] + [NODES])
    lo, hi = int(offsets[comm.rank]), int(offsets[comm.rank + 1])
    mine = NodeEmbedding(hi - lo, DIM, lo=lo, part_offsets=offsets, comm=comm, optimizer=optimizer, lr=0.1, seed=3)
    whole = NodeEmbedding(NODES, DIM, optimizer=optimizer, lr=0.1, seed=3)  # the one-process reference
    start = whole.weight.copy()
    assert np.array_equal(mine.weight, start[lo:hi]), "rows start by global id"
    sent = 0
    for step in range(4):
        ids = batch_ids(comm.rank, step)
        loss_of(mine.pull(ids), comm.rank, step).backward()
        mine.step()
        sent += 4 * DIM * int(((ids < lo) | (ids >= hi)).sum())
        every = [batch_ids(r, step) for r in range(comm.size)]
        rows = whole.pull(np.concatenate(every))
        parts = torch.split(rows, [len(e) for e in every])
        (sum(loss_of(p, r, step) for r, p in enumerate(parts)) / comm.size).backward()
        whole.step()
    assert np.allclose(mine.weight, whole.weight[lo:hi], atol=1e-5), np.abs(mine.weight - whole.weight[lo:hi]).max()
    untouched = np.arange(lo, hi) >= NODES - 10
    assert np.array_equal(mine.weight[untouched], start[lo:hi][untouched]), "an untouched row moved"
    assert mine.bytes_sent == sent and (comm.size == 1 or mine.bytes_received == sent)
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1]))
