"""Every runnable example runs (under mpiexec where it is an MPI program)."""
import subprocess
import sys

import numpy as np
import pytest

from _mpirun import ROOT, run_python

pytestmark = pytest.mark.mpi


def test_custom_loop_example_trains_on_two_ranks(tmp_path):
    rc, out = run_python(2, [str(ROOT / "examples" / "custom_loop.py"), "--dataset",
                             "synthetic:num_nodes=8000,avg_degree=8,num_features=16", "--root", str(tmp_path),
                             "--epochs", "3"], timeout=180)
    assert rc == 0, out[-3000:]
    losses = [float(out.split(f"epoch {e}: loss")[1].split()[0]) for e in range(3)]
    acc = float(out.split("epoch 2:")[1].split("test acc")[1].split()[0])
    assert losses[2] < losses[0] and acc > 0.3, out[-2000:]  # 8 classes: chance is 0.125


def test_custom_npz_example_end_to_end(tmp_path):
    graph = tmp_path / "g.npz"
    res = subprocess.run([sys.executable, str(ROOT / "examples" / "custom_npz.py"), "--out", str(graph),
                          "--nodes", "3000"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert set(np.load(graph).files) >= {"edge_index", "x", "y", "train_idx", "val_idx", "test_idx"}
    rc, out = run_python(2, ["-m", "mpignn.train", "--dataset", f"npz:{graph}", "--root",
                             str(tmp_path), "--hidden", "32", "--batch-size", "128", "--fanout", "5,5"],
                         timeout=240)  # the defaults' mode and converge rule (a small graph: full-graph)
    assert rc == 0, out[-3000:]
    acc = float(out.split("final test accuracy")[1].split()[0])
    assert acc > 0.8, out[-2000:]


def test_hetero_npz_example_end_to_end(tmp_path):
    """The featureless authors carry the topics: with learnable rows 2 ranks classify the papers well above
    what their weak features allow (chance is 0.25)."""
    graph = tmp_path / "papers.npz"
    res = subprocess.run([sys.executable, str(ROOT / "examples" / "hetero_npz.py"), "--out", str(graph),
                          "--papers", "3000", "--authors", "1000"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    keys = set(np.load(graph).files)
    assert {"num_nodes__author", "x__paper", "edge_index__author__writes__paper", "y__paper"} <= keys
    rc, out = run_python(2, ["-m", "mpignn.train", "--dataset", f"npz:{graph}", "--root",
                             str(tmp_path), "--embed-dim", "16", "--epochs", "3", "--hidden", "32",
                             "--batch-size", "128", "--fanout", "5,5"], timeout=180)
    assert rc == 0, out[-3000:]
    acc = float(out.split("final test accuracy")[1].split()[0])
    assert acc > 0.85, out[-2000:]
