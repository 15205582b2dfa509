"""`mpignn.mpi` is MPI only (issue #26 item 2): a package of small modules by job that imports nothing of torch,
PyG, numba or the rest of mpignn beyond errors/env/watchdog, keeps today's public names, and runs its helpers on
2 ranks in an interpreter where torch cannot be imported."""
from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from _mpirun import ROOT, run_mpi, run_mpi_raw

PACKAGE = ROOT / "mpignn" / "mpi"
# `from mpignn.mpi import X` keeps working for each of these (rendezvous_endpoint moved to mpignn.launch.rendezvous).
PUBLIC = {"Topology", "world", "topology", "whoami", "check_launcher", "chunk_bounds", "ceil_split",
          "steps_per_epoch", "pad_to_steps", "root_first", "run_once", "check_all", "alltoallv", "allreduce_sum",
          "allreduce_max", "run_main", "abort_on_uncaught", "RootFailedError", "print0", "thread_budget", "MAX_COUNT",
          "exchange_counts", "library_version", "segment_starts", "check_same", "all_arrived"}
ALLOWED = {"mpignn.errors", "mpignn.env", "mpignn.fileio", "mpignn.mpi.watchdog"}  # leaves: no torch


def test_mpi_is_a_package_of_small_modules_importing_only_leaves_and_watchdog():
    files = sorted(PACKAGE.glob("*.py"))
    assert PACKAGE.is_dir() and len(files) >= 5, files
    for path in files:
        assert len(path.read_text().splitlines()) < 400, f"{path.name} has 400 lines or more"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:  # `from mpignn import env`: the module
                names = [f"mpignn.{a.name}" for a in node.names] if node.module == "mpignn" else [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in ("torch", "torch_geometric", "numba", "pymetis"), f"{path.name} imports {name}"
                if top == "mpignn" and name != "mpignn":
                    assert name in ALLOWED or name.startswith("mpignn.mpi."), f"{path.name} imports {name}"


def test_public_names_are_re_exported_explicitly_without_torch():
    code = ("import sys; sys.modules['torch'] = None; import mpignn.mpi as m; "
            "print(' '.join(sorted(m.__all__))); print(hasattr(m, '__getattr__'), hasattr(m, 'rendezvous_endpoint'));"
            "print(all(getattr(m, x) is not None for x in m.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    names, flags, present = out.stdout.splitlines()
    assert set(names.split()) == PUBLIC
    assert flags == "False False" and present == "True"


@pytest.mark.mpi
def test_helpers_run_on_two_ranks_with_torch_unimportable(tmp_path):
    run_mpi("mpi_without_torch.py", 2, tmp_path, timeout=90)


EXIT = """
import atexit, sys, threading, time
from mpignn.mpi.run import exit_process

class Freed:
    def __del__(self):
        print("module teardown ran", flush=True)

kept = Freed()
atexit.register(print, "atexit ran", flush=True)
threading.Thread(target=lambda: (time.sleep(0.3), print("thread joined", flush=True))).start()
print("unflushed", end="")
exit_process(3)
"""


def test_exit_process_keeps_the_exit_but_the_module_teardown():
    """What `python -m mpignn.train` ends with (mpi.run.exit_process): the code, a live thread joined, the atexit
    functions (mpi4py's MPI_Finalize among them) and unflushed output kept; the modules are not freed one by one."""
    out = subprocess.run([sys.executable, "-c", EXIT], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 3, out.stderr
    assert out.stdout.splitlines() == ["unflushedthread joined", "atexit ran"], out.stdout  # no teardown line


def test_a_watchdog_expiry_ends_the_process_even_where_mpi_is_not_running():
    """abort_job returns without MPI (not initialized, or finalized); the expiry must not return with it."""
    code = ("from types import SimpleNamespace\nfrom mpignn.mpi.watchdog import Watchdog\n"
            "Watchdog._end(SimpleNamespace(on_expiry=None), 'mpignn: error: expired')\nprint('returned')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (out.returncode, out.stdout) == (1, ""), out.stdout + out.stderr
    assert "mpignn: error: expired" in out.stderr


def test_ctrl_c_inside_a_compiled_kernel_is_an_interrupt_not_a_crash(capsys):
    """A KeyboardInterrupt that lands in numba's dispatcher (loading a cached kernel, seen in a clean clone) comes
    out as a SystemError caused by it: run_main still says one line and exits 130, no traceback, no root cause."""
    from mpignn.mpi.run import EXIT_INTERRUPTED, run_main

    def main():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(<function sample_rows>) returned a result with an exception set") from exc

    def crash():
        raise SystemError("a real fault")

    assert run_main(main) == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert "interrupted (SIGINT)" in err and "Traceback" not in err and "SystemError" not in err, err
    assert run_main(crash) == 1  # one rank here: no abort
    err = capsys.readouterr().err
    assert "Traceback" in err and "root cause" in err and "interrupted" not in err, err


EARLY = """
import time
from mpi4py import MPI
from mpignn.mpi.run import exit_process

MPI.COMM_WORLD.Barrier()
if MPI.COMM_WORLD.rank == 1:
    time.sleep(1.0)  # still at work when rank 0 has gone
    print("rank 1 finished", flush=True)
exit_process(0)
"""


@pytest.mark.mpi
def test_exit_process_finalizes_mpi_so_a_rank_that_ends_first_ends_no_other():
    """mpi4py calls MPI_Finalize from C at exit, which os._exit skips: without it Hydra killed rank 1 here and
    mpiexec still returned 0."""
    rc, out = run_mpi_raw(2, [sys.executable, "-c", EARLY], timeout=60, cwd=ROOT)
    assert rc == 0 and "rank 1 finished" in out, out[-2000:]


@pytest.mark.mpi
def test_a_late_reply_vouches_for_no_rank_stopped_since(tmp_path):
    """A pong left unread after a long wait, then rank 1 stopped: the watchdog names it, not 'every rank answers'."""
    run_mpi("stale_pong.py", 2, timeout=90)
