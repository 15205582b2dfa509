"""Tier 3: `python -m mpignn.bench.memory` prints a row per stage (load, partition, train) with the graph size."""
import json
import subprocess
import sys

import pytest


@pytest.mark.mpi
def test_memory_bench_rows_per_stage(tmp_path):
    cmd = [sys.executable, "-m", "mpignn.bench.memory", "--dataset",
           "synthetic:num_nodes=6000,avg_degree=8,num_features=64", "--ranks", "2", "--root", str(tmp_path),
           "--method", "random", "--json", "--", "--batch-size", "256", "--hidden", "32", "--fanout", "5,5"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [(r["stage"], r["config"]) for r in rows] == [
        ("load", "1 process"), ("partition", "random, 1 part"), ("partition", "random, 2 parts"),
        ("train", "1 rank"), ("train", "2 ranks")]
    table = out.stdout.split("{")[0]
    assert table.count(f"6,000 nodes, {rows[0]['edges']:,} edges") == 5 and "structure (int64 CSR)" in table
    assert all(r["nodes"] == 6000 and r["peak"] > 0 and r["per_csr"] == r["peak"] / r["csr_mib"] for r in rows)
    one, two = rows[3], rows[4]
    assert two["part"] < one["part"]  # each of 2 parts holds fewer array bytes than the whole graph
    assert one["share"] == 1.0 and two["share"] == pytest.approx(two["peak"] / one["peak"])
    # the graph's memory: part arrays + id map + cache, against 1/N of one rank's plus the cache
    assert one["cache"] == 0 and one["bound"] == one["graph_mib"] > one["part"] * 0.9
    assert two["bound"] == pytest.approx(one["graph_mib"] / 2 + two["cache"])
    assert two["cache"] < two["graph_mib"] < two["part"] + two["cache"] + 1  # + the id map; no unread arrays
