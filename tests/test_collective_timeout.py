"""Bounded waits: a rank stopped by the kernel (SIGSTOP) ends a 2-rank training job within --collective-timeout
plus a few seconds, every live rank exits non-zero, and the message names the rank that stopped answering; a
collective entered by a subset of ranks is named a quarter of the way to the timeout."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from _mpirun import WORKERS, mpi_cmd, run_cmd, run_mpi_raw

pytestmark = pytest.mark.mpi

BOUND = 10


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _rank_pid(launcher: int, rank: int, marker: bytes = b"mpignn.train") -> int | None:
    """The pid of MPI rank `rank` (a process whose command line holds `marker`) among the launcher's
    descendants (Hydra gives each rank PMI_RANK)."""
    for pid in _descendants(launcher):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"PMI_RANK={rank}".encode() in environ and marker in cmdline:
            return pid
    return None


def test_a_stopped_rank_ends_the_job_within_the_bound_and_is_named(tmp_path):
    argv = [sys.executable, "-m", "mpignn.train", "--dataset", "synthetic:num_nodes=5000", "--epochs", "200",
            "--hidden", "16", "--fanout", "5,5", "--batch-size", "256", "--root", str(tmp_path / "data"),
            "--collective-timeout", str(BOUND)]
    cmd, env = mpi_cmd(2, argv, timeout=300)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    first_epoch = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "epoch   0 |" in line:
                first_epoch.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stopped = None
    try:
        deadline = time.monotonic() + 240
        while not first_epoch.wait(1):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no first epoch line (rc={proc.poll()}):\n" + "".join(lines)[-4000:])
        stopped = _rank_pid(proc.pid, 1)
        assert stopped is not None, "rank 1's process not found under mpiexec"
        os.kill(stopped, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            rc = proc.wait(timeout=BOUND + 30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {BOUND + 30}s after rank 1 was stopped:\n" + "".join(lines)[-4000:])
        took = time.monotonic() - t0
        reader.join(timeout=10)
        out = "".join(lines)
        print(f"ended {took:.1f}s after SIGSTOP, rc={rc}:", *[ln for ln in lines if "mpignn:" in ln], sep="\n")
        assert rc != 0, out[-4000:]
        assert took < BOUND + 30, (took, out[-4000:])
        assert f"rank 1 (pid {stopped} on" in out and "stopped answering" in out, out[-4000:]
        assert "[rank 0] expected every collective to finish within --collective-timeout 10s" in out, out[-4000:]
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_config_file_one_rank_cannot_read_ends_the_job(tmp_path):
    """Each rank reads its own copy of --config: a read error on one rank is not agreed, so `run_main` aborts
    the job instead of leaving the rank that read its copy fine waiting in the first collective."""
    good = tmp_path / "good.toml"
    good.write_text('dataset = "synthetic:num_nodes=2000"\nepochs = 1\n')
    common = ["-m", "mpignn.train", "--root", str(tmp_path / "data"), "--config"]
    cmd, env = mpi_cmd(1, [sys.executable, *common, str(good)], timeout=120)
    cmd += [":", "-n", "1", sys.executable, *common, str(tmp_path / "missing-on-this-host.toml")]
    rc, out = run_cmd(cmd, 60, env)
    assert rc != 0, out[-3000:]
    assert "[rank 1] cannot read --config" in out and "missing-on-this-host.toml" in out, out[-3000:]


def test_a_collective_entered_by_a_subset_of_ranks_is_named_early(tmp_path):
    """PyG's `if rank == 0: test()`: rank 0 waits in a loader's collective while rank 1 waits in dist.barrier();
    before, the job ended after the process group's timeout blaming rank 1 (in an MPI barrier: silence)."""
    timeout = 20
    rc, out = run_mpi_raw(2, [sys.executable, WORKERS / "subset_collective.py", tmp_path, str(timeout)], timeout=90)
    assert rc != 0 and "MPIGNN-UNREACHABLE" not in out, out[-4000:]
    # late to a collective (outside any): a warning names rank 1 and its line; the job goes on
    warning = next(ln for ln in out.splitlines() if "mpignn: warning:" in ln)
    assert "rank 1 did not: rank 1 runs subset_collective.py:" in warning and "`time.sleep(8)`" in warning, warning
    assert "NeighborLoader(input_nodes='test'): epoch 0 step 0" in warning, warning
    assert out.count("MPIGNN-LATE-OK") == 2, out[-4000:]
    # in another collective: the job ends, naming rank 1, its barrier and the line that called it
    error = next(ln for ln in out.splitlines() if "mpignn: error:" in ln)
    assert "[rank 0] expected every rank to enter NeighborLoader(input_nodes='test'): epoch 1 step 0" in error, error
    assert "rank 1 waits in torch.distributed.distributed_c10d.barrier called at subset_collective.py:" in error
    assert "Neither collective can finish" in error and "docs/from-pyg.md" in error, error
    waited = int(error.split("waiting ")[1].split("s)")[0])
    assert waited < timeout / 2, error  # well before the timeout
