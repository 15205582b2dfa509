"""`python -m mpignn.bench`: does scaling out pay off for my graph?

Runs `mpignn.train` on 1 rank (1 thread, and all threads) and on N ranks with METIS and random partitions,
with and without the remote-feature cache, and prints epoch time, seeds/s, the time split, remote bytes and
cache hit rate; saves a PNG of the split when matplotlib is installed. Each row gets the cores its label
says: "1 rank x 1 thread" runs pinned to one core (its sampler's prefetch thread included), N ranks are
bound one core share each (MPICH -bind-to core, Open MPI --bind-to core).

    python -m mpignn.bench --dataset synthetic:num_nodes=200000,avg_degree=20,num_features=100 --ranks 2
"""
from __future__ import annotations

import argparse
import os
import tempfile

from mpignn.bench._common import run_train, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpignn.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--root", default="", help="dataset root (default: a temporary folder)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2, help="the last epoch is reported")
    parser.add_argument("--fanout", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--cache-size", type=int, default=50_000)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--configs", default="1x1,1xall,metis+cache,metis,random+cache,random,replicated",
                        help="which of: 1x1, 1xall, metis+cache, metis, random+cache, random, replicated")
    parser.add_argument("--plot", default="bench_split.png", help="PNG of the time split ('' for none)")
    parser.add_argument("--no-bind", action="store_true", help="leave core binding to the launcher's defaults")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    n = args.ranks
    cache = ["--cache-size", str(args.cache_size)]
    share = max(1, cores // n)  # cores per rank in the N-rank rows
    # name: (label, ranks, extra flags, cores per rank; 0 = unbound)
    known = {"1x1": ("1 rank x 1 thread", 1, ["--threads", "1"], 1),
             "1xall": (f"1 rank x {cores} threads", 1, ["--threads", str(cores)], 0),
             "metis+cache": (f"{n} ranks metis+cache", n, cache, share),
             "metis": (f"{n} ranks metis, no cache", n, ["--cache-size", "0"], share),
             "random+cache": (f"{n} ranks random+cache", n, ["--partition-method", "random", *cache], share),
             "random": (f"{n} ranks random, no cache", n, ["--partition-method", "random", "--cache-size", "0"],
                        share),
             "replicated": (f"{n} ranks replicated", n, ["--replicated"], share)}
    try:
        configs = [known[c] for c in args.configs.split(",")]
    except KeyError as exc:
        parser.error(f"--configs: unknown {exc}; choose from {', '.join(known)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp
        for name, ranks, extra, bind in configs:
            common = ["--dataset", args.dataset, "--root", root, "--epochs", str(args.epochs), "--fanout",
                      args.fanout, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
                      "--precision", args.precision, "--eval-every", str(args.epochs + 1)]
            last = run_train(ranks, [*common, *extra], cores_per_rank=0 if args.no_bind else bind)[-1]
            rows.append({"config": name, **last})
            print(f"  done: {name}", flush=True)
    base = rows[0]["seeds_per_s"]
    for row in rows:
        row["speedup"] = row["seeds_per_s"] / base
        row["remote_mib"] = (row["remote_feature_bytes"] + row["remote_structure_bytes"]) / 2**20
        row["feat_mib"] = row["remote_feature_bytes"] / 2**20
    print(f"{args.dataset}: fanout {args.fanout}, batch {args.batch_size}, hidden {args.hidden}, "
          f"{args.precision}, epoch {args.epochs - 1} of {args.epochs}")
    print(table(rows, [("config", "config", "s"), ("epoch_s", "epoch s", ".2f"), ("seeds_per_s", "seeds/s", ".0f"),
                       ("speedup", "x 1x1", ".2f"), ("sample_s", "sample", ".2f"), ("exchange_s", "exchange", ".2f"),
                       ("compute_s", "compute", ".2f"), ("allreduce_s", "allreduce", ".2f"),
                       ("feat_mib", "feat MiB", ".1f"), ("remote_mib", "remote MiB", ".1f"),
                       ("cache_hit_rate", "cache hit", ".2f"), ("peak_rss_mb", "peak MiB", ".0f")]))
    if args.plot:
        _plot(rows, args.plot)
    return 0


def _plot(rows: list[dict], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: pip install matplotlib, or -e .[bench])")
        return
    parts = ["sample_s", "exchange_s", "compute_s", "allreduce_s"]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.5))
    left = [0.0] * len(rows)
    for part in parts:
        values = [r[part] for r in rows]
        ax.barh([r["config"] for r in rows], values, left=left, label=part[:-2])
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds per epoch (slowest rank)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot saved to {path}")


if __name__ == "__main__":
    raise SystemExit(main())
