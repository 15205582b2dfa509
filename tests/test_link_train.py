"""Tier 3: `python -m mpignn.train --task link` on 1 and 2 ranks (partitioned and replicated): the metrics
file carries the link fields, and the held-out edges are scored well above chance."""
import json
import shutil
import subprocess
import sys

import pytest

from _mpirun import SHARED, run_mpi_raw
from mpignn.config.train_config import parse
from mpignn.training.record import undocumented
from mpignn.errors import ConfigError

pytestmark = pytest.mark.mpi

SMALL = ["--dataset", "Cora", "--task", "link", "--epochs", "2", "--hidden", "32", "--batch-size", "256",
         "--fanout", "5,5", "--lr", "0.01", "--link-tails", "20",
         "--feature-norm", "none", "--eval-every", "1"]  # as before the link defaults (row: slower first epochs)
FIELDS = ("val_auc", "test_auc", "test_mrr", "test_hits@10", "edges_per_s", "best_val_auc", "test_auc_at_best_val")


def _run(n, tmp_path, *extra):
    if not (tmp_path / "Cora").is_dir():
        shutil.copytree(SHARED / "datasets" / "Cora", tmp_path / "Cora")
    metrics = tmp_path / f"m{n}{''.join(extra)}.jsonl"
    rc, out = run_mpi_raw(n, [sys.executable, "-m", "mpignn.train", "--root", str(tmp_path), *SMALL,
                              "--metrics-out", str(metrics), *extra], timeout=240)
    assert rc == 0, out[-4000:]
    assert "final test AUC" in out, out[-2000:]
    return [json.loads(line) for line in metrics.read_text().splitlines()]


@pytest.mark.skipif(not (SHARED / "datasets" / "Cora").is_dir(), reason="../shared/datasets is absent")
@pytest.mark.parametrize("n,extra", [(1, []), (2, []), (2, ["--replicated"])])
def test_link_training_reports_exact_pair_metrics(tmp_path, n, extra):
    last = _run(n, tmp_path, *extra)[-1]
    for field in FIELDS:
        assert last[field] is not None, field
    assert "val_acc" not in last and "seeds_per_s" not in last
    assert undocumented(last) == [], "document the new key in training.record.SCHEMA"
    assert last["test_auc"] > 0.8 and 0 < last["test_mrr"] <= 1 and last["edges_per_s"] > 0, last


def test_link_flags_are_checked():
    with pytest.raises(ConfigError, match="--link-val and --link-test"):
        parse(["--task", "link", "--link-val", "0.6", "--link-test", "0.5"])
    with pytest.raises(ConfigError, match="--link-tails"):
        parse(["--task", "link", "--link-tails", "0"])
    with pytest.raises(ConfigError, match="--feature-norm must be one of none, row"):
        parse(["--feature-norm", "l2"])


def test_the_partition_cli_writes_the_link_split_training_uses(tmp_path):
    """`python -m mpignn.partition --task link` stores the held-out edges; training with the same seed and link
    flags takes the folder, one with other flags (or a node-task folder) is refused with the hint."""
    data = "synthetic:num_nodes=2000,avg_degree=6,num_features=8"

    def partition(out, *extra):
        made = subprocess.run([sys.executable, "-m", "mpignn.partition", "--dataset", data, "--root", str(tmp_path),
                               "--num-parts", "2", "--out", str(out), "--seed", "3", *extra],
                              capture_output=True, text=True, timeout=180)
        assert made.returncode == 0, made.stderr[-2000:]

    def train(out, *extra):
        return run_mpi_raw(2, [sys.executable, "-m", "mpignn.train", "--dataset", data, "--root", str(tmp_path),
                               "--task", "link", "--partitions", str(out), "--epochs", "1", "--hidden", "16",
                               "--fanout", "4,3", "--seed", "3", "--link-tails", "7", *extra], timeout=180)

    partition(tmp_path / "links", "--task", "link", "--link-tails", "7")
    assert (tmp_path / "links" / "links" / "SPLIT.json").is_file()
    rc, log = train(tmp_path / "links")
    assert rc == 0 and "final test AUC" in log, log[-3000:]
    rc, log = train(tmp_path / "links", "--link-test", "0.2")
    assert rc != 0 and "HINT: partition with python -m mpignn.partition --task link" in log, log[-2000:]
    partition(tmp_path / "nodes")
    rc, log = train(tmp_path / "nodes")
    assert rc != 0 and "or drop --partitions" in log, log[-2000:]
