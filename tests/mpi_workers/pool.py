"""A standing MPI job that runs worker scripts one after another: argv QUEUE PARENT_PID.

Request K is QUEUE/K.json, {"argv": [SCRIPT, ARGS...] or ["-m", MODULE, ARGS...], "cwd": folder or null, "env":
{variables set for the run}}; a MODULE is one of `cli_many.MAINS`, run as its CLI runs it. Each rank writes its
process id to QUEUE/rankR.pid first (for the tests that signal a rank). Every rank waits for a request by polling
the file system, not in an MPI call (MPICH spins in a blocking collective, and this job idles between tests on a
2-core machine), runs the script as `python SCRIPT ARGS` would (`__main__`, sys.argv), with its file descriptors 1
and 2 in QUEUE/K.rankR.log, and writes its exit code to QUEUE/K.rankR.rc. The job ends when the process that started
it (pytest) or the queue folder is gone (`tests/_mpirun.py::_Pool.close`), or is killed.

Why: a rank spends 5-7 s of CPU importing torch and torch-geometric, most of a small test job; the tests'
jobs that need no fresh process share these ranks (`tests/_mpirun.py::run_mpi`)."""
import ctypes
import json
import os
import runpy
import select
import sys
import traceback
from pathlib import Path

from cli_many import run_cli, run_to

from mpignn.launch.allocator import tune_allocator
from mpignn.mpi import world
from mpignn.mpi.run import exit_process
from mpignn.mpi.watchdog import watching

_M_MMAP_MAX, _MMAP_MAX_DEFAULT = -4, 65536  # glibc's mallopt parameter and its default


def _run(argv: list[str], cwd: str | None, env: dict[str, str]) -> int:
    here, saved = os.getcwd(), {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    if cwd:
        os.chdir(cwd)
    try:
        return run_cli(argv[1], argv[2:]) if argv[0] == "-m" else _script(argv)
    finally:
        dog = watching()
        if dog is not None:  # each run starts without one on every rank, as in a fresh process: a rank that kept
            dog.stop()  # one would skip the next `watch`'s collective Dup that the others enter
        os.chdir(here)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _script(argv: list[str]) -> int:
    saved = sys.argv, list(sys.path)
    sys.argv = list(argv)
    sys.path.insert(0, str(Path(argv[0]).parent))  # as `python SCRIPT` puts the script's folder first
    # One malloc policy for every script, whatever ran here before (a CLI run maps the big blocks): freed memory
    # kept, as MPIGNN_MALLOC=heap, which also spares the examples' big per-step blocks their page faults
    kept = tune_allocator({"MPIGNN_MALLOC": "heap"})
    try:
        runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # uncaught: the rank ends, as `python SCRIPT` would, and the launcher ends the job
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    finally:
        if kept:  # blocks may be mapped again, as in a fresh process (the next CLI run sets its threshold)
            ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_MAX, _MMAP_MAX_DEFAULT)
        sys.argv, sys.path[:] = saved[0], saved[1]


def _alive(pid: int, queue: Path) -> bool:
    """Whether the tests still want this job: its queue folder is there, and the process that started it (0:
    not visible from here, on an emulated host) runs."""
    if not queue.is_dir():
        return False
    if pid == 0:
        return True
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _wake_pipe(path: Path) -> int:
    """A named pipe the tests write a byte to with each request (`tests/_mpirun.py::_Pool.submit`): an idle rank
    sleeps in `select` on it. Polling the folder every 20 ms cost each idle rank 1% of a core, and a run holds up to
    about 18 idle ranks of standing jobs. The rank holds a writer itself, so the pipe never reads as closed."""
    os.mkfifo(path)
    read = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    return read


def main(queue: str, parent: str) -> int:
    import torch  # noqa: F401  (paid once, while the first test prepares)
    import torch_geometric  # noqa: F401

    os.environ["MPIGNN_TEST_POOL_RANK"] = "1"  # scripts end by SystemExit here (cli_many.end)
    rank, queue, parent_pid = world().rank, Path(queue), int(parent)
    wake = _wake_pipe(queue / f"rank{rank}.wake")
    (queue / f"rank{rank}.pid.tmp").write_text(str(os.getpid()))
    (queue / f"rank{rank}.pid.tmp").rename(queue / f"rank{rank}.pid")
    for k in range(sys.maxsize):
        request = queue / f"{k}.json"
        while not request.exists():
            if not _alive(parent_pid, queue):
                return 0
            if select.select([wake], [], [], 1.0)[0]:
                os.read(wake, 4096)
        spec = json.loads(request.read_text())
        code = run_to(queue / f"{k}.rank{rank}.log", lambda: _run(spec["argv"], spec["cwd"], spec.get("env", {})))
        tmp = queue / f"{k}.rank{rank}.tmp"  # the test reads the exit code whole or not at all
        tmp.write_text(str(code))
        tmp.rename(queue / f"{k}.rank{rank}.rc")
    return 0


if __name__ == "__main__":
    exit_process(main(*sys.argv[1:]))  # as the CLIs end: no freeing of every module when the tests are done
