"""Tier 3: `python -m mpignn.bench.rankmem` prints per-rank bytes of the access estimate and the link AUC, by
formula and measured under mpiexec, with the results of the old and new code identical."""
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.mpi


def test_rankmem_bench_formula_and_measured_rows(tmp_path):
    cmd = [sys.executable, "-m", "mpignn.bench.rankmem", "--ranks", "2", "--nodes", "40000,1000000", "--measure",
           "40000", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [(r["nodes"], r["how"]) for r in rows] == [(40000, "formula"), (1000000, "formula"), (40000, "measured")]
    big = rows[1]  # 17 bytes a node before; 9 a node of the part now
    assert big["access_before"] == pytest.approx(17e6 / 2**20) and big["access_now"] == pytest.approx(4.5e6 / 2**20)
    assert big["auc_before"] == pytest.approx(16 * 1e6 / 2**20)  # 10% of 10 edges a node scored, 16 bytes each
    measured = rows[2]
    assert measured["same"] is True and measured["ranks"] == 2
    assert 0 < measured["auc_now"] < measured["auc_before"] / 2 and measured["access_now"] > 0
