"""Ceiling split of N items covers each exactly once; uneven inputs still run equal step counts."""
import sys

import numpy as np

from mpignn.mpi import allreduce_sum, ceil_split, pad_to_steps, run_main, steps_per_epoch, world


def main(n: int) -> None:
    comm = world()
    mine = np.asarray(ceil_split(np.arange(n), comm.size, comm.rank))
    everything = np.concatenate(comm.allgather(mine))
    assert np.array_equal(np.sort(everything), np.arange(n)), "split lost or repeated items"
    sizes = comm.allgather(len(mine))
    assert max(sizes) - min(sizes) <= 1 and len(sizes) == comm.size, sizes
    uneven = np.arange(comm.rank * 7 + 1)  # rank r holds 7r+1 items
    steps = steps_per_epoch(comm, len(uneven), batch_size=3)
    batches = pad_to_steps(uneven, steps, batch_size=3)
    assert len(batches) == steps
    for batch in batches:  # a collective per step, like DDP's gradient all-reduce
        allreduce_sum(comm, [len(batch)])
    assert set(np.concatenate(batches).tolist()) == set(uneven.tolist())
    print(f"sizes={sizes} steps={steps}", flush=True)
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, int(sys.argv[1])))
