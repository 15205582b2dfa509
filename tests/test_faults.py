"""Reliability: injected faults end the job fast with the failing rank's message; bad input fails cleanly
on every rank; interrupted writes never leave a file a later run trusts."""
import sys
import time

import numpy as np
import pytest

from _mpirun import WORKERS, run_mpi_raw

pytestmark = pytest.mark.mpi


def _fault(mode, bad_rank, root, n=3, timeout=90):
    start = time.monotonic()
    rc, out = run_mpi_raw(n, [sys.executable, str(WORKERS / "faults.py"), mode, str(bad_rank), str(root)],
                          timeout=timeout)
    return rc, out, time.monotonic() - start


def test_sigkill_of_one_rank_ends_every_rank(tmp_path):
    rc, out, elapsed = _fault("kill", 1, tmp_path)
    assert rc != 0, out
    assert "rank 1 kills itself" in out
    assert "RANK 1" in out or "rank 1" in out.lower(), out[-2000:]  # Hydra names the lost rank
    assert elapsed < 60, f"{elapsed:.0f}s"


@pytest.mark.parametrize("mode,bad_rank", [("sampling", 2), ("exchange", 1), ("backward", 0)])
def test_exception_inside_training_ends_the_job_with_its_message(tmp_path, mode, bad_rank):
    rc, out, elapsed = _fault(mode, bad_rank, tmp_path)
    assert rc != 0
    assert f"injected {mode} fault on rank {bad_rank}" in out, out[-3000:]
    assert f"root cause: rank {bad_rank}" in out
    assert elapsed < 45, f"{elapsed:.0f}s"
