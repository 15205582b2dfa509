"""rank0-first preparation: MODE ok | fail | hang | hosts (each rank the first of its own host, as with
node-local disks: the last one's work outlasts the watchdog's bound, and the agreement after it waits for it)."""
import contextlib
import sys
import time
from pathlib import Path

from mpignn.mpi import prep, root_first, run_main, world
from mpignn.mpi.watchdog import Watchdog, watching


def per_host(comm) -> None:
    expired: list[str] = []
    if watching() is not None:
        watching().stop()
    dog = Watchdog(comm, 2.0, on_expiry=expired.append).start()
    group = prep._group
    prep._group = lambda comm, per_host: contextlib.nullcontext(comm.Split(comm.rank if per_host else 0))
    try:  # a host per rank
        with root_first(comm, per_host=True, timeout=30, what="a compile") as first:
            assert first
            if comm.rank == comm.size - 1:
                time.sleep(5)  # a cold compile on this host, a cache read on the others
        comm.Barrier()
    finally:
        prep._group = group
        dog.stop()
    assert not expired, expired
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


def main(mode: str, folder: str) -> None:
    comm = world()
    if mode == "hosts":
        return per_host(comm)
    marker = Path(folder) / "ready.txt"
    with root_first(comm, timeout=5 if mode == "hang" else None, what="writing the marker") as first:
        if first:
            if mode == "fail":
                raise ValueError("disk full while writing the marker")
            if mode == "hang":
                time.sleep(60)
            tmp = marker.with_suffix(".tmp")
            tmp.write_text("prepared by rank 0")
            tmp.rename(marker)
    assert marker.read_text() == "prepared by rank 0", "ready signal came before the file"
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1], sys.argv[2]))
