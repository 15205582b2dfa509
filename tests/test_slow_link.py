"""Tier 3, a slow network (docs/node-local.md): on 2 hosts x 1 rank with every link capped at 10 Gbit/s,
1 Gbit/s and 100 Mbit/s, the same command trains the same records (every field but times and memory) as on
uncapped links, with the defaults' `auto`s and cooperatively. The times against bandwidth come from
`python -m mpignn.bench --launcher ... --rates ...` (docs/benchmarks.md)."""
import json
import sys

from test_multihost import _multihost, pytestmark  # noqa: F401  (the markers: mpi, the tool, root)

from _mpirun import WORKERS, ok_ranks
from mpignn.training.record import repeatable

RATES = ["none", "10gbit", "1gbit", "100mbit"]


def test_records_do_not_depend_on_the_link_rate(tmp_path):
    argv = ["--root", str(tmp_path / "root"), "--dataset", "synthetic:num_nodes=20000,avg_degree=8,num_features=64",
            "--epochs", "2", "--hidden", "16", "--batch-size", "256", "--fanout", "5,5", "--threads", "1"]
    rc, out = _multihost(2, 1, [sys.executable, str(WORKERS / "link_rates.py"), str(tmp_path), ",".join(RATES),
                                *argv], timeout=400)
    assert rc == 0 and len(ok_ranks(out)) == 2, out[-4000:]
    for mode in ("auto", "cooperative"):
        runs = {rate: [json.loads(line) for line in (tmp_path / f"{rate}-{mode}.jsonl").read_text().splitlines()]
                for rate in RATES}
        assert len(runs["none"]) == 2, mode
        for rate in RATES[1:]:
            assert [repeatable(r) for r in runs[rate]] == [repeatable(r) for r in runs["none"]], (mode, rate)
