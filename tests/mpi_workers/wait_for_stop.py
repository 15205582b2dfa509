"""Wait for SIGUSR2 through mpignn.training.stopping.StopSignal: argv OUT_DIR SECONDS. Each rank prints its pid once
the handler is installed on every rank, then writes OUT_DIR/rank<R>.txt with `requested=True|False` when the
flag is set or SECONDS have passed, whichever comes first."""
import os
import sys
import time
from pathlib import Path

from mpignn.mpi import run_main, world
from mpignn.training.stopping import StopSignal


def main(out: str, seconds: str) -> None:
    comm = world()
    stop = StopSignal().install()
    comm.Barrier()
    print(f"waiting rank={comm.rank} pid={os.getpid()}", flush=True)
    deadline = time.monotonic() + float(seconds)
    while not stop.requested and time.monotonic() < deadline:
        time.sleep(0.02)
    (Path(out) / f"rank{comm.rank}.txt").write_text(f"requested={stop.requested}")
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1], sys.argv[2]))
