"""rank0-first preparation: MODE ok | fail | hang | fail-host (per-host rank 0 of host... each host fails)."""
import sys
import time
from pathlib import Path

from mpignn.mpi import root_first, run_main, world


def main(mode: str, folder: str) -> None:
    comm = world()
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
