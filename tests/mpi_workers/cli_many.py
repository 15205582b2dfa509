"""Several command-line runs in one MPI job: argv CASES OUT. CASES is a JSON file of {name: [module, args...]}
(module `mpignn.train`, `mpignn.predict` or `mpignn.partition`, whose `main(argv)` the CLI calls); each rank
runs them in order through `run_main`, as `python -m MODULE` does, with its stdout and stderr (file descriptors
1 and 2, so logging and C output too) in OUT/NAME.rankR.log and the exit code in OUT/NAME.rankR.rc.

Why: a rank spends 5-7 s of CPU importing torch and torch-geometric, most of a small test job; one job that
runs a test module's cases pays it once (`tests/_mpirun.py::run_cli_many`)."""
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Callable

from mpignn.mpi import run_main, world
from mpignn.mpi.run import exit_process

MAINS = {"mpignn.train": "mpignn.train", "mpignn.predict": "mpignn.predict.cli",
         "mpignn.partition": "mpignn.partition.cli"}


def run_cli(module: str, args: list[str]) -> int:
    """`python -m MODULE ARGS` as the CLI runs it, in this process."""
    return run_main(importlib.import_module(MAINS[module]).main, args)


def run_to(log: Path, run: Callable[[], int]) -> int:
    """`run()` with file descriptors 1 and 2 in `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        return run()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def in_turn(modes: str, run: Callable[[str], None]) -> None:
    """`run(mode)` for each of the comma-separated `modes`, each from the job's own environment."""
    for mode in modes.split(","):
        saved = dict(os.environ)
        try:
            run(mode)
        finally:
            os.environ.clear()
            os.environ.update(saved)


def end(code: int | None) -> None:
    """End a worker script as the CLIs end (`exit_process`: no freeing of every module); in the tests' standing
    job (pool.py sets MPIGNN_TEST_POOL_RANK) by SystemExit, which the job catches."""
    if os.environ.get("MPIGNN_TEST_POOL_RANK"):
        sys.exit(code)
    exit_process(code)


def main(cases: str, out: str) -> None:
    comm, out = world(), Path(out)
    for name, (module, *args) in json.loads(Path(cases).read_text()).items():
        comm.Barrier()  # one case at a time on every rank
        code = run_to(out / f"{name}.rank{comm.rank}.log", lambda: run_cli(module, args))
        (out / f"{name}.rank{comm.rank}.rc").write_text(str(code))
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    end(run_main(main, *sys.argv[1:]))
