"""Tier 3: the MPI helpers under real `mpiexec -n N`."""
import socket
import sys
import time

import pytest

from _mpirun import WORKERS, run_mpi, run_mpi_raw

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("n", [1, 2, 3])
def test_split_and_equal_steps(n):
    out = run_mpi("split_steps.py", n, 1000)
    if n == 3:
        assert "sizes=[334, 333, 333]" in out


def test_split_fewer_items_than_ranks():
    out = run_mpi("split_steps.py", 3, 2)
    assert "sizes=[1, 1, 0]" in out


@pytest.mark.parametrize("n", [1, 3])
def test_root_first_ready_signal(n, tmp_path):
    run_mpi("root_first.py", n, "ok", tmp_path)


def test_first_ranks_of_several_hosts_agree_however_long_each_prepared(tmp_path):
    """With node-local disks each host's first rank prepares: the agreement after it waits for the slowest (a
    cold compile) past --collective-timeout while every rank answers, up to --prep-timeout plus it."""
    run_mpi("root_first.py", 2, "hosts", tmp_path)


def test_root_failure_reaches_every_rank(tmp_path):
    rc, out = run_mpi_raw(3, [sys.executable, str(WORKERS / "root_first.py"), "fail", str(tmp_path)], timeout=60)
    assert rc != 0
    assert "disk full" in out
    for rank in (1, 2):
        assert f"[rank {rank}] rank 0 on" in out and "failed during writing the marker" in out, out


def test_stuck_root_times_out(tmp_path):
    start = time.monotonic()
    rc, out = run_mpi_raw(2, [sys.executable, str(WORKERS / "root_first.py"), "hang", str(tmp_path)], timeout=50)
    assert rc != 0 and "waited 5s for rank 0" in out, out
    assert time.monotonic() - start < 40


@pytest.mark.parametrize("bad_rank", [0, 1])
def test_failure_on_one_rank_ends_the_job_fast(bad_rank):
    start = time.monotonic()
    rc, out = run_mpi_raw(3, [sys.executable, str(WORKERS / "fail_rank.py"), str(bad_rank)], timeout=60)
    elapsed = time.monotonic() - start
    assert rc != 0, out
    assert f"injected failure on rank {bad_rank}" in out, out
    assert f"root cause: rank {bad_rank} on {socket.gethostname()} (pid " in out, out  # rank, host and cause
    assert elapsed < 20, f"took {elapsed:.1f}s to end the job"


@pytest.mark.parametrize("n", [2, 3])
def test_rendezvous_and_allreduce_over_gloo(n):
    run_mpi("rendezvous.py", n, timeout=90)


@pytest.mark.parametrize("limit", [1, 4])
def test_alltoallv_in_pieces_matches_one_call(limit):
    # MAX_COUNT lowered to `limit` rows: uneven and empty sends, 1-D/2-D/3-D arrays, five dtypes (one structured)
    out = run_mpi("alltoallv_pieces.py", 3, limit)
    assert out.count("cases=15") == 3, out[-2000:]


@pytest.mark.parametrize("n", [2, 3])
def test_a_rank_waiting_for_a_late_peer_sleeps_instead_of_spinning(n):
    """mpi.collectives.all_arrived: the waiting ranks of each checked collective poll a nonblocking barrier
    with short sleeps, so they leave the core to the ranks with work (docs/failures.md). In a fresh job with
    MPICH's own blocking wait, which spins (the suite's other jobs yield: `_mpirun.clean_env`)."""
    out = run_mpi("late_peer.py", n, 1.5, MPIR_CVAR_ENABLE_HEAVY_YIELD="0")
    assert out.count("CPU-s in") == 3 * n, out[-3000:]


def test_the_tests_standing_job_is_reused_and_dropped_after_a_failure(tmp_path):
    """`_mpirun.run_python`: the same ranks run one script after another (same pids, the script's arguments and
    exit code each time), and a run that fails on some rank leaves a fresh job for the next."""
    from _mpirun import run_python

    script = tmp_path / "pid.py"
    script.write_text("import os, sys\nfrom mpignn.mpi import world\n"
                      "print(f'pid={os.getpid()} rank={world().rank} arg={sys.argv[1]}', flush=True)\n"
                      "sys.exit(3 if sys.argv[1] == 'fail' and world().rank == 1 else 0)\n")

    def pids(arg, rc=0):
        code, out = run_python(2, [script, arg], timeout=60)
        assert code == rc and out.count(f"arg={arg}") == 2, out[-2000:]
        return sorted(out.split("pid=")[1:])

    first = pids("a")
    assert pids("b") == [p.replace("arg=a", "arg=b") for p in first]
    failed = pids("fail", rc=3)
    assert failed == [p.replace("arg=a", "arg=fail") for p in first]
    assert {p.split()[0] for p in pids("c")}.isdisjoint({p.split()[0] for p in first})
