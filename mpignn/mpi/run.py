"""Running a program on every rank: a clean, job-wide exit on any failure (`run_main`, `abort_on_uncaught`).
mpi4py is imported only when MPI is running.
"""
from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable, NoReturn

from mpignn import env as _env
from mpignn.errors import MpignnError, is_agreed
from mpignn.mpi.topology import world

__all__ = ["run_main", "exit_process", "print0", "abort_on_uncaught", "abort_job", "EXIT_INTERRUPTED"]

EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT, as a shell reports it)."""


def print0(*args: Any, rank: int | None = None, **kwargs: Any) -> None:
    """print() on global rank 0 only (rank from MPI if not given); flushes so batch logs stay in order."""
    if rank is None:
        rank = world().rank
    if rank == 0:
        print(*args, flush=True, **kwargs)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def run_main(main: Callable[..., int | None], *args: Any, **kwargs: Any) -> int:
    """Run `main` and turn any failure into a clean, job-wide exit; return its exit code.

    An agreed MpignnError prints one line per rank and exits 1; Ctrl-C exits EXIT_INTERRUPTED; any other
    exception prints its traceback and root cause and calls `COMM_WORLD.Abort(1)`, so no rank stays blocked.
    """
    rank, host = _rank_for_messages(), socket.gethostname()
    try:
        code = main(*args, **kwargs)
        return 0 if code is None else int(code)
    except SystemExit:
        raise
    except BaseException as exc:
        if not _interrupted(exc):
            return _fail(exc, rank, host)
        # Ctrl-C: one line per rank, no traceback
        print(f"mpignn: error: [rank {rank}] interrupted (SIGINT); the work since the last checkpoint is lost. "
              "HINT: SIGTERM or SIGUSR2 stop at the next step and save a checkpoint (--checkpoint-dir)",
              file=sys.stderr, flush=True)
        abort_job(EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED


def _interrupted(exc: BaseException | None) -> bool:
    """Whether Ctrl-C caused `exc`: a KeyboardInterrupt, or an error raised by the code it crossed (a compiled
    kernel's dispatcher turns it into a SystemError whose cause it is) or by cleanup while it was handled."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def exit_process(code: int | None) -> NoReturn:
    """End a CLI's process with `code` (None: 0) as the interpreter would, short of freeing every module.

    Once torch and torch-geometric are imported that teardown is long (and can hang in a library's destructor),
    and it comes after the run's files are closed and renamed into place. The rest of an exit
    stays: non-daemon threads are joined, the atexit functions run (logging's flush), then MPI_Finalize, which
    mpi4py calls from C at exit: a rank that ends without it makes Hydra kill the ranks still running."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    if _mpi_running():
        sys.modules["mpi4py.MPI"].Finalize()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if code is None else code)


def _fail(exc: BaseException, rank: int, host: str) -> int:
    if isinstance(exc, MpignnError):
        print(f"mpignn: error: [rank {rank}] {_one_line(exc)}", file=sys.stderr, flush=True)
    else:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        print(f"mpignn: root cause: rank {rank} on {host} (pid {os.getpid()}) raised "
              f"{type(exc).__name__}: {_one_line(exc)}", file=sys.stderr, flush=True)
    if not is_agreed(exc):
        abort_job(1)
    return 1


def abort_on_uncaught() -> None:
    """Make an uncaught exception (a script without `run_main`) end the whole job as `run_main` would, instead
    of leaving the other ranks waiting in their next collective."""
    previous = sys.excepthook
    if getattr(previous, "_mpignn", False):
        return

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        if _interrupted(exc):
            previous(kind, exc, tb)
            abort_job(EXIT_INTERRUPTED)
            return
        _fail(exc.with_traceback(tb), _rank_for_messages(), socket.gethostname())  # aborts unless agreed

    hook._mpignn = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _mpi_running() -> bool:
    mod = sys.modules.get("mpi4py.MPI")
    return mod is not None and mod.Is_initialized() and not mod.Is_finalized()


def _rank_for_messages() -> int:
    if _mpi_running():
        return sys.modules["mpi4py.MPI"].COMM_WORLD.rank
    return _env.detect().rank


def abort_job(code: int, *, alone: bool = False) -> None:
    """End every rank with `code` (MPI_Abort); not collective: one rank ends them all. Returns only where MPI is
    not running, or on one rank unless `alone` (a caller that exits itself ends the job there); otherwise this
    process ends with `code` even if Abort returns (os._exit) or hangs (SIGALRM after 10 s).
    """
    if not _mpi_running() or (sys.modules["mpi4py.MPI"].COMM_WORLD.size == 1 and not alone):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    # Abort makes the launcher kill every process at once; give it a moment to forward what this rank
    # just printed, or the traceback and the root-cause line can be lost.
    time.sleep(0.5)
    # Abort goes through the launcher; where the link to it is cut it may never return, or return without
    # ending this process: the kernel ends it (SIGALRM's default action) if Abort has not within 10 s
    signal.alarm(10)
    try:
        sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(code)
    finally:
        os._exit(code)
