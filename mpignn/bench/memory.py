"""`python -m mpignn.bench.memory`: peak memory per stage, each stage in a process of its own: load (generate
or read), partition (1 and N parts) and train (1 and N ranks), beside the graph's CSR and feature sizes. Peaks
are ru_maxrss; `graph MiB` is what a rank holds that depends on the graph, beside 1/N of one rank's plus the cache.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from mpignn.bench._common import TEMP_ROOT, bench_parser, run_bench, run_json, run_train, table
from mpignn.partition.format import read_meta

DEFAULT = "synthetic:num_nodes=2000000,avg_degree=25,num_features=100,train=0.01,val=0.005,test=0.005"

_LOAD = """
import json, sys
from mpignn.launch.allocator import peak_rss_mb
from mpignn.partition.cli import load_for_partitioning
g = load_for_partitioning(sys.argv[1], sys.argv[2])
print(json.dumps({"nodes": g.num_nodes, "edges": g.num_edges, "x_mib": g.x.nbytes / 2**20, "peak": peak_rss_mb()}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("mpignn.bench.memory", __doc__, dataset=DEFAULT, ranks=2, root=TEMP_ROOT)
    parser.add_argument("--method", default="auto", choices=["auto", "metis", "kaminpar", "random"])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines after the table")
    parser.add_argument("extra", nargs="*", help="more mpignn.train flags (after --)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp
        size = run_json([sys.executable, "-c", _LOAD, args.dataset, root])
        csr_mib = (size["nodes"] + 1 + size["edges"]) * 8 / 2**20
        graph = f"{size['nodes']:,} nodes, {size['edges']:,} edges"
        rows.append({"stage": "load", "config": "1 process", "peak": size["peak"]})
        print("  done: load", flush=True)
        folders = {}
        for ranks in (1, args.ranks):
            folders[ranks] = Path(tmp) / f"parts{ranks}"
            rep = run_json([sys.executable, "-m", "mpignn.partition", "--dataset", args.dataset, "--root", root,
                             "--num-parts", str(ranks), "--out", str(folders[ranks]), "--method", args.method,
                             "--json"])
            rows.append({"stage": "partition", "config": f"{rep['method']}, {ranks} part{'s' * (ranks > 1)}",
                         "peak": rep["peak_rss_mb"], "seconds": rep["seconds"]})
            print(f"  done: partition into {ranks}", flush=True)
        for ranks in (1, args.ranks):
            rec = run_train(ranks, ["--dataset", args.dataset, "--root", root, "--partitions",
                                    str(folders[ranks]), "--epochs", "1", "--minibatch", "independent",
                                    *args.extra])[-1]
            parts = read_meta(folders[ranks]).parts  # the largest one's arrays: what one rank loads
            rows.append({"stage": "train", "config": f"{ranks} rank{'s' * (ranks > 1)}",
                         "part": max(sum(f["bytes"] for f in p["files"].values()) for p in parts) / 2**20,
                         "startup": rec["load_peak_rss_mb"], "graph_mib": rec["graph_mib"], "cache": rec["cache_mib"],
                         "peak": rec["peak_rss_mb"], "seconds": rec.get("epoch_s")})
            print(f"  done: train on {ranks} ranks", flush=True)
    one = rows[-2]  # training on 1 rank
    for row in rows:
        row["graph"] = graph
        row["per_csr"] = row["peak"] / csr_mib
        if row["stage"] == "train":
            row["steps"] = row["peak"] - row["startup"]
            row["share"] = row["peak"] / one["peak"]
    for row, ranks in ((one, 1), (rows[-1], args.ranks)):  # the graph's memory: 1/N of one rank's + the cache
        row["bound"] = one["graph_mib"] / ranks + row["cache"]
    print(f"{args.dataset}: structure (int64 CSR) {csr_mib:.0f} MiB, features {size['x_mib']:.0f} MiB; peak MiB "
          "per process (train: max over ranks)")
    print(table(rows, [("stage", "stage", "s"), ("config", "config", "s"), ("graph", "graph", "s"),
                       ("seconds", "s", ".1f"), ("part", "part arrays", ".0f"), ("startup", "start-up peak", ".0f"),
                       ("steps", "added by steps", ".0f"), ("peak", "peak", ".0f"), ("per_csr", "peak / CSR", ".2f"),
                       ("share", "peak / 1 rank", ".2f"), ("graph_mib", "graph MiB", ".0f"),
                       ("cache", "of it cache", ".0f"), ("bound", "1/N + cache", ".0f")]))
    if args.json:
        for row in rows:
            print(json.dumps({**row, "csr_mib": csr_mib, "x_mib": size["x_mib"], "nodes": size["nodes"],
                              "edges": size["edges"]}))
    return 0


if __name__ == "__main__":
    run_bench(main)
