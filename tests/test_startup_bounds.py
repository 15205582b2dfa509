"""Start-up is bounded and agreed (Tier 3, 2 ranks): ranks that parsed other options stop in one line before any
data is touched, and a rank stopped during start-up (before MPI_Init returns, or while rank 0 prepares the data)
ends the job within --collective-timeout (plus --prep-timeout for the preparation) and a margin, naming it."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from _mpirun import clean_env, mpiexec, run_cmd

pytestmark = pytest.mark.mpi

SMALL = ["--dataset", "synthetic:num_nodes=3000", "--epochs", "1", "--fanout", "3,2", "--batch-size", "256",
         "--threads", "1", "--prep-timeout", "20", "--collective-timeout", "12"]


def test_ranks_that_parsed_other_options_refuse_in_one_line_before_any_data(tmp_path):
    train = [sys.executable, "-m", "mpignn.train", "--root", str(tmp_path), *SMALL]
    cmd = [mpiexec(), "-launcher", "fork", "-n", "1", *train, ":", "-n", "1", *train, "--lr", "0.01"]
    rc, out = run_cmd(cmd, 150, clean_env(MPIEXEC_TIMEOUT="130"))
    line = ("expected every rank to run with the same configuration; got lr = 0.01 on rank 1 and 0.003 on rank 0. "
            "HINT:")
    assert rc == 1 and out.count(line) == 2 and "Traceback" not in out, out[-3000:]
    assert not (tmp_path / "mpignn-parts").exists(), "refused after the data was prepared"


def _start(tmp_path):
    cmd = [mpiexec(), "-launcher", "fork", "-n", "2", sys.executable, "-m", "mpignn.train", "--root", str(tmp_path),
           *SMALL]
    proc = subprocess.Popen(cmd, env=clean_env(MPIEXEC_TIMEOUT="170"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return proc, lines


def _rank_pid(proc, rank, deadline):
    """The pid of rank `rank` (a child of Hydra's proxy whose environment says PMI_RANK=rank)."""
    while time.monotonic() < deadline:
        proxies = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        for proxy in proxies:
            for pid in subprocess.run(["pgrep", "-P", proxy], capture_output=True, text=True).stdout.split():
                try:
                    environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                except OSError:
                    continue
                if f"PMI_RANK={rank}".encode() in environ:
                    return int(pid)
        time.sleep(0.01)
    pytest.fail("rank process not found")


def _ends_within(proc, lines, seconds, stopped):
    start = time.monotonic()
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the job still ran {seconds}s after a rank stopped:\n" + "".join(lines)[-3000:])
    finally:
        try:
            os.kill(stopped, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.2)
    return proc.returncode, "".join(lines), time.monotonic() - start


def _in_mpi_init(proc, rank_pid, deadline) -> None:
    """Wait until the rank is inside MPI_Init: its guard (mpi.startup.deadline, a child process) runs. Its
    imports before that take seconds or tens of seconds, by how loaded the machine is."""
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-P", str(rank_pid), "-f", "select"], capture_output=True).returncode == 0:
            return
        assert proc.poll() is None, "the job ended before rank 0 reached MPI_Init"
        time.sleep(0.05)
    pytest.fail("rank 0 did not reach MPI_Init")


def test_a_rank_stopped_before_mpi_init_returns_ends_the_job(tmp_path):
    proc, lines = _start(tmp_path)
    pid = _rank_pid(proc, 1, time.monotonic() + 30)
    os.kill(pid, signal.SIGSTOP)  # still importing: rank 0 waits for it in MPI_Init
    _in_mpi_init(proc, _rank_pid(proc, 0, time.monotonic() + 30), time.monotonic() + 120)
    rc, out, took = _ends_within(proc, lines, 12 + 30, pid)
    assert rc != 0 and "expected MPI_Init to connect this rank to the others within 12s" in out, out[-3000:]


def test_a_rank_stopped_while_rank_0_prepares_the_data_ends_the_job_naming_it(tmp_path):
    proc, lines = _start(tmp_path)
    pid = _rank_pid(proc, 1, time.monotonic() + 30)
    deadline = time.monotonic() + 90
    while not any(" config {" in line for line in lines):  # rank 0 passed the start-up's agreement
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
        time.sleep(0.01)
    os.kill(pid, signal.SIGSTOP)
    rc, out, took = _ends_within(proc, lines, 20 + 12 + 30, pid)
    assert rc != 0 and f"rank 1 (pid {pid}" in out and "stopped answering" in out, out[-3000:]
