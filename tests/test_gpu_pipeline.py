"""GPU tests (marker `gpu`) of the paths added after the device tests were first written: cooperative
mini-batches with hidden rows and their gradients crossing between device tensors, and exact layer-wise
prediction on the device. Two ranks share one device over gloo, so one GPU is enough."""
import json
import sys

import numpy as np
import pytest

from _devices import DEVICE, needs_device
from _mpirun import run_mpi_raw
from mpignn.predict import load

pytestmark = [pytest.mark.gpu, pytest.mark.mpi, needs_device]

SMALL = ["--dataset", "synthetic:num_nodes=6000,avg_degree=8,num_features=16", "--hidden", "32",
         "--batch-size", "256", "--fanout", "5,5", "--lr", "0.01"]


def _run(module, root, *args, n=2, timeout=300):
    rc, out = run_mpi_raw(n, [sys.executable, "-m", module, "--root", str(root), *args], timeout=timeout)
    assert rc == 0, out[-4000:]
    return out


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("exchange", ["mpi", "torch"])
def test_cooperative_on_the_device_computes_each_row_once_and_learns_as_on_the_cpu(tmp_path, exchange):
    runs = {}
    for i, device in enumerate(("cpu", DEVICE)):
        metrics = tmp_path / f"run-{i}.jsonl"
        _run("mpignn.train", tmp_path, *SMALL, "--epochs", "3", "--minibatch", "cooperative", "--device", device,
             "--backend", "gloo", "--exchange", exchange, "--metrics-out", str(metrics))
        runs[device] = _records(metrics)[-1]
    dev, cpu = runs[DEVICE], runs["cpu"]
    assert dev["minibatch"] == "cooperative" and dev["redundancy"] == 1.0 and dev["halo_step_bytes"] > 0, dev
    assert dev["rows_per_step"] == cpu["rows_per_step"]  # the same sampled batches, whatever the device
    assert abs(dev["test_acc_at_best_val"] - cpu["test_acc_at_best_val"]) <= 0.03, (cpu, dev)


def test_predictions_on_the_device_equal_the_cpus(tmp_path):
    ckpt = tmp_path / "ckpt"
    _run("mpignn.train", tmp_path, *SMALL, "--epochs", "1", "--device", "cpu", "--checkpoint-dir", str(ckpt), n=1)
    got = {}
    for i, device in enumerate(("cpu", DEVICE)):
        out = tmp_path / f"pred-{i}"
        _run("mpignn.predict", tmp_path, "--checkpoint-dir", str(ckpt), "--out", str(out), "--logits",
             "--device", device, "--backend", "gloo")
        got[device] = load(out)
    assert np.array_equal(got[DEVICE]["node_id"], got["cpu"]["node_id"])
    assert np.allclose(got[DEVICE]["logits"], got["cpu"]["logits"], atol=1e-4)
    assert np.allclose(got[DEVICE]["emb"], got["cpu"]["emb"], atol=1e-4)
