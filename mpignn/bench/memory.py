"""`python -m mpignn.bench.memory`: what partitioning saves per rank. Partitions the graph into 1 and N parts
(in a separate process, so preparation does not count), trains an epoch on each, and prints, per rank (max over
ranks): the part's arrays, the peak by the end of start-up (imports, part, cache), the training peak, and that
peak as a share of the single-process one.

    python -m mpignn.bench.memory --ranks 2
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from mpignn.bench._common import run_train, table

DEFAULT = "synthetic:num_nodes=2000000,avg_degree=25,num_features=100,train=0.01,val=0.005,test=0.005"


def part_mib(folder: Path) -> float:
    """The largest part's array bytes (what one rank loads), from META.json."""
    meta = json.loads((folder / "META.json").read_text())
    return max(sum(f["bytes"] for f in part["files"].values()) for part in meta["parts"]) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpignn.bench.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=DEFAULT)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--method", default="metis", choices=["metis", "random"])
    parser.add_argument("--root", default="", help="dataset root (default: a temporary folder)")
    parser.add_argument("extra", nargs="*", help="more mpignn.train flags (after --)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp
        for ranks in (1, args.ranks):
            folder = Path(tmp) / f"parts{ranks}"
            subprocess.run([sys.executable, "-m", "mpignn.partition", "--dataset", args.dataset, "--root", root,
                            "--num-parts", str(ranks), "--out", str(folder), "--method", args.method, "--json"],
                           check=True, stdout=subprocess.DEVNULL)
            rec = run_train(ranks, ["--dataset", args.dataset, "--root", root, "--partitions", str(folder),
                                    "--epochs", "1", *args.extra])[-1]
            rows.append({"config": f"{ranks} rank{'s' * (ranks > 1)}", "part": part_mib(folder),
                         "startup": rec["load_peak_rss_mb"], "peak": rec["peak_rss_mb"]})
            print(f"  done: {ranks} ranks", flush=True)
    for row in rows:
        row["share"] = row["peak"] / rows[0]["peak"]
        row["steps"] = row["peak"] - row["startup"]
    print(f"{args.dataset}, {args.method}, one epoch; MiB per rank, max over ranks")
    print(table(rows, [("config", "config", "s"), ("part", "part arrays", ".0f"),
                       ("startup", "start-up peak", ".0f"), ("steps", "added by steps", ".0f"),
                       ("peak", "peak", ".0f"), ("share", "peak / 1 rank", ".2f")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
