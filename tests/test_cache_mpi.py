"""Tier 3: the remote-feature cache on 2 ranks: built at start-up, hit by training batches, reported."""
import json
import re

import pytest

from _mpirun import WORKERS, run_mpi, run_python

pytestmark = pytest.mark.mpi


CASES = ["auto:none:fp32", "100:row:fp16", "auto:row:bf16"]


@pytest.fixture(scope="module")
def cache_job(tmp_path_factory):
    """The output of one 2-rank job checking every case of CASES in turn (a bootstrap and shutdown each)."""
    root = tmp_path_factory.mktemp("cache")
    _, out = run_python(2, [WORKERS / "feature_cache.py", root, *CASES], timeout=180)
    return out


@pytest.mark.parametrize("case", CASES)
def test_cache_is_built_and_hits(cache_job, case):
    """With feature_norm="row" every row, own, fetched or cached, arrives normalised by its owner; with a half
    feature dtype, rounded there and widened to float32 in the batch."""
    assert len(set(re.findall(rf"MPIGNN-OK rank=(\d+) case={case}(?=\s|MPIGNN-OK|$)", cache_job))) == 2, cache_job[-4000:]
    rates = [float(r) for r in re.findall(rf"case={case} cache rows=\d+ hit rate=([0-9.]+)", cache_job)]
    assert rates and min(rates) > 0, cache_job[-2000:]


def test_training_reports_the_budget(tmp_path):
    metrics = tmp_path / "m.jsonl"
    rc, out = run_python(2, ["-m", "mpignn.train", "--root", str(tmp_path), "--dataset",
                             "synthetic:num_nodes=3000,avg_degree=10,num_features=6", "--epochs", "1", "--hidden",
                             "16", "--batch-size", "256", "--fanout", "4,3", "--minibatch", "independent",
                             "--metrics-out", str(metrics)],
                         timeout=180)
    assert rc == 0, out[-4000:]
    line = [l for l in out.splitlines() if "feature cache:" in l]
    assert len(line) == 1 and "--cache-size auto" in line[0] and "GiB available over 2 ranks" in line[0], out[-3000:]
    rec = json.loads(metrics.read_text().splitlines()[-1])
    assert rec["cache_rows"] > 0 and rec["cache_mib"] == pytest.approx(rec["cache_rows"] * 6 * 4 / 2**20)  # float32
    assert f"{rec['cache_rows']:,} rows" in line[0] and rec["cache_hit_rate"] > 0


@pytest.mark.parametrize("mode", ["exact", "memory"])
def test_access_estimate_is_the_old_formula_in_part_sized_memory(mode):
    """Each rank's estimate equals one dense propagation over the whole graph (the formula before); on a 4M-node
    graph, rank 0 (2000 own nodes, 500k in-edges from 5000 remote ones) traces less than 12 bytes a node
    (the old dense sum and count over every node took 16 each: 73.7 MiB there, now 29)."""
    out = run_mpi("access_estimate.py", 2, mode, timeout=180)
    assert out.count("peak=") == 2, out[-2000:]
