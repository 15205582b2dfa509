"""Tier 3: `python -m mpignn.train --task link` on 1 and 2 ranks (partitioned and replicated): the metrics
file carries the link fields, and the held-out edges are scored well above chance."""
import json
import shutil

import pytest

from _config import parse
from _mpirun import SHARED, run_cli_here, run_cli_many
from _records import undocumented
from mpignn.errors import ConfigError

pytestmark = pytest.mark.mpi

SMALL = ["--dataset", "Cora", "--task", "link", "--epochs", "2", "--hidden", "32", "--batch-size", "256",
         "--fanout", "5,5", "--lr", "0.01", "--link-tails", "20",
         "--feature-norm", "none", "--eval-every", "1"]  # as before the link defaults (row: slower first epochs)
FIELDS = ("val_auc", "test_auc", "test_mrr", "test_hits@10", "edges_per_s", "best_val_auc", "test_auc_at_best_val")


HAS_CORA = (SHARED / "datasets" / "Cora").is_dir()
CORA_RUNS = {"m1": (1, []), "m2": (2, []), "m2-replicated": (2, ["--replicated"]),
             "m2-labor": (2, ["--sampler", "labor"])}  # layer-neighbour batches: the encoder takes their denominators
DATA = "synthetic:num_nodes=2000,avg_degree=6,num_features=8"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: (exit codes, output)} of the runs below, one job per world size, and their folder. The partition
    CLI first writes a link-task folder and a node-task folder for the 2-rank runs that take them."""
    base = tmp_path_factory.mktemp("link")
    for name, extra in (("links", ["--task", "link", "--link-tails", "7"]), ("nodes", [])):
        code, printed = run_cli_here("mpignn.partition", ["--dataset", DATA, "--root", base, "--num-parts", "2",
                                                           "--out", base / name, "--seed", "3", *extra])
        assert code == 0, printed[-2000:]
    if HAS_CORA:
        shutil.copytree(SHARED / "datasets" / "Cora", base / "Cora")
    by_world = {1: {}, 2: {}}
    for name, (n, extra) in CORA_RUNS.items() if HAS_CORA else ():
        by_world[n][name] = ["mpignn.train", "--root", base, *SMALL, "--metrics-out", base / f"{name}.jsonl", *extra]
    for name, parts, extra in (("links", "links", []), ("links-other-flags", "links", ["--link-test", "0.2"]),
                               ("node-folder", "nodes", [])):  # the refused ones last
        by_world[2][name] = ["mpignn.train", "--dataset", DATA, "--root", base, "--task", "link", "--partitions",
                             base / parts, "--epochs", "1", "--hidden", "16", "--fanout", "4,3", "--seed", "3",
                             "--link-tails", "7", *extra]
    results = {}
    for n, cases in by_world.items():
        results.update(run_cli_many(n, cases, base / f"out{n}", timeout=600) if cases else {})
    return base, results


@pytest.mark.skipif(not HAS_CORA, reason="../shared/datasets is absent")
@pytest.mark.parametrize("name", list(CORA_RUNS))
def test_link_training_reports_exact_pair_metrics(runs, name):
    codes, out = runs[1][name]
    assert codes == [0] * CORA_RUNS[name][0], out[-4000:]
    assert "final test AUC" in out, out[-2000:]
    last = json.loads((runs[0] / f"{name}.jsonl").read_text().splitlines()[-1])
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


def test_the_partition_cli_writes_the_link_split_training_uses(runs):
    """`python -m mpignn.partition --task link` stores the held-out edges; training with the same seed and link
    flags takes the folder, one with other flags (or a node-task folder) is refused with the hint."""
    base, results = runs
    assert (base / "links" / "links" / "SPLIT.json").is_file()
    codes, log = results["links"]
    assert codes == [0, 0] and "final test AUC" in log, log[-3000:]
    codes, log = results["links-other-flags"]
    assert 0 not in codes and "HINT: partition with python -m mpignn.partition --task link" in log, log[-2000:]
    codes, log = results["node-folder"]
    assert 0 not in codes and "or drop --partitions" in log, log[-2000:]
