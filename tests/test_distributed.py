"""Tier 3: partition-aware sampling, feature exchange and training under mpiexec."""
import pytest

from _mpirun import run_mpi

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("n,method,cache", [(2, "metis", 0), (3, "random", 200), (2, "hetero", 500)])
def test_distributed_sampling_equals_single_process(tmp_path, n, method, cache):
    run_mpi("dist_sampling.py", n, tmp_path / "parts", method, cache, timeout=120)
