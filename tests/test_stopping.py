"""The SIGUSR2 flag and the Slurm requeue request (scontrol imitated on PATH), and where a SIGUSR2 must be
sent under Hydra's mpiexec (the mpich wheel) for the ranks to see it: to a rank, not to mpiexec or its proxy."""
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest

from _mpirun import WORKERS, mpi_cmd
from mpignn.training.stopping import EXIT_STOPPED, StopSignal, requeue


def test_the_handler_only_sets_a_flag():
    before = signal.getsignal(signal.SIGUSR2)
    stop = StopSignal().install()
    try:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGUSR2)
        assert stop.requested and stop.name == "SIGUSR2" and EXIT_STOPPED == 75
    finally:
        stop.uninstall()
    assert signal.getsignal(signal.SIGUSR2) is before


def test_sigterm_takes_the_same_path():
    """What scancel and a time limit send: the flag, not the default (the process dies, nothing saved)."""
    before = signal.getsignal(signal.SIGTERM)
    stop = StopSignal().install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGUSR2)
        assert stop.name == "SIGTERM"  # the first one names the stop
    finally:
        stop.uninstall()
    assert signal.getsignal(signal.SIGTERM) is before


def test_requeue_runs_scontrol_with_the_job_id(tmp_path):
    log = tmp_path / "calls"
    fake = tmp_path / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    assert requeue(env) == "requeued Slurm job 4242" and log.read_text() == "requeue 4242\n"
    assert requeue({"PATH": os.environ["PATH"]}).startswith("not requeued: SLURM_JOB_ID is not set")
    fake.write_text("#!/bin/sh\necho 'Requested operation is presently disabled' >&2\nexit 1\n")
    assert "exited 1: Requested operation is presently disabled" in requeue(env)


def _start_waiting(tmp_path, seconds):
    """2 ranks of mpi_workers/wait_for_stop.py under Hydra's mpiexec; returns (process, output lines, rank pids)
    once both ranks have their handler installed."""
    cmd, env = mpi_cmd(2, [sys.executable, str(WORKERS / "wait_for_stop.py"), str(tmp_path), str(seconds)], 60)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    deadline = time.monotonic() + 60
    while len(pids := re.findall(r"waiting rank=\d+ pid=(\d+)", "".join(lines))) < 2:
        if proc.poll() is not None or time.monotonic() > deadline:
            _kill_group(proc.pid)
            pytest.fail("the ranks did not start:\n" + "".join(lines)[-3000:])
        time.sleep(0.05)
    return proc, lines, [int(p) for p in pids]


def _kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:  # all gone already
        pass


def _wait_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{pid}") and "Z" not in _state(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def _state(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"  # gone between the two reads


def _outcome(tmp_path):
    return sorted(p.read_text() for p in tmp_path.glob("rank*.txt"))


@pytest.mark.mpi
def test_sigusr2_sent_to_one_rank_sets_its_flag_under_mpiexec(tmp_path):
    proc, lines, pids = _start_waiting(tmp_path, 3)
    os.kill(pids[1], signal.SIGUSR2)
    try:
        assert proc.wait(timeout=60) == 0, "".join(lines)[-3000:]
    finally:
        _kill_group(proc.pid)
    assert _outcome(tmp_path) == ["requested=False", "requested=True"]


@pytest.mark.mpi
def test_sigusr2_sent_to_hydra_mpiexec_kills_the_job_before_any_rank_sees_it(tmp_path):
    proc, lines, pids = _start_waiting(tmp_path, 20)
    os.kill(proc.pid, signal.SIGUSR2)
    try:
        assert proc.wait(timeout=30) == -signal.SIGUSR2, "".join(lines)[-3000:]  # its default action: it dies
        assert _wait_gone(pids, 15), f"ranks {pids} still run after mpiexec died"
    finally:
        _kill_group(proc.pid)
    assert _outcome(tmp_path) == []  # no handler ran: a rank that saw the signal writes requested=True at once


@pytest.mark.mpi
def test_sigusr2_sent_to_hydras_proxy_fails_mpiexec_and_the_ranks_run_on_without_it(tmp_path):
    proc, lines, pids = _start_waiting(tmp_path, 4)
    proxy = {int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                            text=True).stdout.split()}
    assert len(proxy) == 1, proxy
    os.kill(proxy.pop(), signal.SIGUSR2)
    try:
        assert proc.wait(timeout=30) not in (0, -signal.SIGUSR2), "".join(lines)[-3000:]
        assert _wait_gone(pids, 30), f"ranks {pids} still run 30 s after their proxy died"
    finally:
        _kill_group(proc.pid)
    assert _outcome(tmp_path) == ["requested=False", "requested=False"]  # they waited out their 4 s
