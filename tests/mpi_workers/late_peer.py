"""A rank that waits in a checked collective for a late peer sleeps between polls instead of spinning: argv
SECONDS. The last rank comes SECONDS late to each of mpignn's checked collectives; every other rank spends under
a fifth of that wait on the CPU (MPICH's blocking calls alone spin at a full core) and gets the right answer."""
import sys
import time

import numpy as np

from mpignn.mpi import allreduce_sum, alltoallv, check_all, run_main, world


def main(seconds: float) -> None:
    comm = world()
    late = comm.rank == comm.size - 1
    calls = {"allreduce_sum": lambda: allreduce_sum(comm, [1.0])[0] == comm.size,
             "alltoallv": lambda: alltoallv(comm, np.full(comm.size, comm.rank), np.ones(comm.size))[0].tolist()
             == list(range(comm.size)),
             "check_all": lambda: check_all(comm, True, "unused") is None}
    for name, call in calls.items():
        if late:
            time.sleep(seconds)
        wall, cpu = time.perf_counter(), time.thread_time()
        assert call(), name
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        if not late:
            assert wall >= 0.8 * seconds and cpu < 0.2 * wall, (name, f"{cpu:.2f} CPU-s in {wall:.2f} s")
        print(f"rank {comm.rank} {name}: {cpu:.2f} CPU-s in {wall:.2f} s", flush=True)
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, float(sys.argv[1])))
