"""Checkpoints: --resume after an interruption reaches the accuracy of an uninterrupted run, on any
world size."""
import sys

import pytest

from _mpirun import run_mpi_raw

pytestmark = pytest.mark.mpi

ARGS = ["--dataset", "synthetic:num_nodes=6000,avg_degree=8,num_features=16", "--hidden", "32", "--batch-size",
        "128", "--fanout", "5,5", "--lr", "0.01", "--eval-every", "100"]


def _acc(n, root, *extra):
    rc, out = run_mpi_raw(n, [sys.executable, "-m", "mpignn.train", "--root", str(root), *ARGS, *extra],
                          timeout=180)
    assert rc == 0, out[-3000:]
    return float(out.split("final test accuracy")[1].split()[0]), out


def test_resume_matches_uninterrupted_run(tmp_path):
    full, _ = _acc(2, tmp_path, "--epochs", "4")
    _acc(2, tmp_path, "--epochs", "2", "--checkpoint-dir", str(tmp_path / "ck"))
    resumed, out = _acc(2, tmp_path, "--epochs", "4", "--checkpoint-dir", str(tmp_path / "ck"), "--resume")
    assert "resumed from" in out and "epoch   2 |" in out and "epoch   0 |" not in out
    assert abs(full - resumed) <= 0.01, (full, resumed)
    # another world size continues from the same checkpoint
    other, out = _acc(3, tmp_path, "--epochs", "5", "--checkpoint-dir", str(tmp_path / "ck"), "--resume")
    assert "after epoch 3" in out and "epoch   4 |" in out
    assert other >= full - 0.05, (full, other)  # one more epoch on 3 ranks keeps (or improves) the model
