"""Rank R raises while the others wait in a collective: run_main must abort the whole job."""
import sys
import time

from mpignn.mpi import run_main, world


def main(bad_rank: int) -> None:
    comm = world()
    comm.Barrier()
    if comm.rank == bad_rank:
        time.sleep(0.2)
        raise RuntimeError(f"injected failure on rank {bad_rank}")
    comm.allreduce(1)  # blocks forever unless the job is aborted
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, int(sys.argv[1])))
