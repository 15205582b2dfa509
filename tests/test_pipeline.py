"""Tier 3: the device pipeline's variants train the same model: the batches, and so every loss and
accuracy, do not depend on the transport (`--exchange`) or on producing batches in a thread (`--prefetch`)."""
import json
import sys

import pytest

from _mpirun import run_mpi_raw

pytestmark = pytest.mark.mpi

SMALL = ["--dataset", "synthetic:num_nodes=5000,avg_degree=8,num_features=16", "--epochs", "2", "--hidden", "32",
         "--batch-size", "128", "--fanout", "5,5", "--lr", "0.01", "--cache-size", "0", "--minibatch", "independent"]
SAME = ("loss", "train_acc", "val_acc", "test_acc", "remote_feature_bytes", "remote_structure_bytes")


def _records(tmp_path, name, *extra):
    metrics = tmp_path / f"{name}.jsonl"
    rc, out = run_mpi_raw(2, [sys.executable, "-m", "mpignn.train", "--root", str(tmp_path), *SMALL,
                              "--metrics-out", str(metrics), *extra], timeout=240)
    assert rc == 0, out[-4000:]
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def test_exchange_and_prefetch_variants_train_identically(tmp_path):
    base = _records(tmp_path, "mpi")
    assert base[-1]["remote_feature_bytes"] > 0, "no cache: rows must cross ranks"
    # without prefetch the step loop waits for every batch's sampling and exchange (max over ranks each)
    assert all(r["wait_s"] >= max(r["sample_s"], r["exchange_s"]) for r in base)
    for name, extra in {"prefetch": ["--prefetch", "on"], "both": ["--exchange", "torch", "--prefetch", "on"]}.items():
        got = _records(tmp_path, name, *extra)
        for want, rec in zip(base, got):
            assert {k: rec[k] for k in SAME} == {k: want[k] for k in SAME}, name


def test_stage_times_cover_the_epoch(tmp_path):
    """Without prefetch the step loop is waiting for batches, computing or all-reducing: the epoch line's
    stage times cover the training time, so they say where the time went."""
    recs = _records(tmp_path, "stages", "--prefetch", "off")
    for rec in recs[1:]:
        parts = rec["wait_s"] + rec["compute_s"] + rec["allreduce_s"]
        # Nothing unaccounted: at least 90% (and 20 ms for the loop's bookkeeping) of the epoch is in the stages.
        # Each stage time is the slowest rank's, so on these 0.1-0.2 s epochs their sum also exceeds the slowest
        # rank's total by the ranks' imbalance (measured up to 26% here): bounded, not equal.
        assert 0.9 * rec["epoch_s"] - 0.02 <= parts <= 1.5 * rec["epoch_s"] + 0.02, \
            {k: rec[k] for k in ("epoch_s", "wait_s", "compute_s", "allreduce_s", "sample_s", "exchange_s")}


def test_row_transport_on_tensors_over_gloo():
    """The collective worker the GPU tests run, here on CPU tensors over gloo (rows stay tensors)."""
    from _mpirun import run_mpi

    run_mpi("device_collectives.py", 2, "cpu", "gloo", timeout=90)
