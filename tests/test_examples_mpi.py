"""The non-GNN example runs under mpirun and agrees with a serial count."""
import sys

import numpy as np
import pytest

from _mpirun import ROOT, run_mpi_raw

pytestmark = pytest.mark.mpi


def test_histogram_example_matches_serial(tmp_path):
    data = tmp_path / "samples.npy"
    rc, out = run_mpi_raw(2, [sys.executable, str(ROOT / "examples" / "mpi_histogram.py"), "--data", str(data),
                              "--count", "100000"], timeout=60)
    assert rc == 0, out
    samples = np.load(data)
    inside = np.histogram(samples, bins=8, range=(-4, 4))[0].sum()
    assert f"counted {inside} of 100000" in out, out
    assert not list(tmp_path.glob("*.tmp*")), "temporary file left behind"
