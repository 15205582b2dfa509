"""`python -m mpignn.bench.soak`: many epochs on several ranks; prints each epoch's peak memory (max over
ranks) and end-of-epoch RSS, to show memory does not grow: RSS falls where memory is given back, so its growth is
memory kept, where a peak's alone may be one larger batch. `--malloc` compares allocators (docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import tempfile

import numpy as np

from mpignn.bench._common import bench_parser, run_bench, run_train, table
from mpignn.launch.allocator import PRELOADS, preload_env


def slope(values: list[float]) -> float:
    """Return MiB per epoch over the second half of the run (the first epochs warm caches up)."""
    tail = values[len(values) // 2:]
    if len(tail) < 2:
        return 0.0
    return float(np.polyfit(np.arange(len(tail)), tail, 1)[0])


def growth(peaks: list[float]) -> float:
    """Return the peak's rise after epoch 3, in % of its value there (0 with fewer epochs)."""
    return 100 * (max(peaks[3:]) / peaks[3] - 1) if len(peaks) > 3 else 0.0


def malloc_env(policy: str) -> dict[str, str | None]:
    """Return the variables of one `--malloc` entry: a preload, or an MPIGNN_MALLOC policy ("default": unset)."""
    if policy in PRELOADS:
        env = preload_env(policy)
        if env is None:
            raise SystemExit(f"--malloc {policy}: {PRELOADS[policy][0]} is not installed. HINT: your system's "
                             f"{policy} package (Debian: {DEBIAN[policy]})")
        return {"MPIGNN_MALLOC": None, **env}
    return {"MPIGNN_MALLOC": None if policy == "default" else policy, "LD_PRELOAD": None}


DEBIAN = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4", "mimalloc": "libmimalloc2.0"}


def soak(args: argparse.Namespace, policy: str) -> list[dict]:
    """Run once under `policy` and print its per-epoch table."""
    with tempfile.TemporaryDirectory() as root:
        recs = run_train(args.ranks, ["--dataset", args.dataset, "--root", root, "--epochs", str(args.epochs),
                                      "--precision", args.precision, *args.extra], env=malloc_env(policy))
    print(f"malloc: {policy}")
    print(table(recs, [("epoch", "epoch", "d"), ("epoch_s", "epoch s", ".2f"), ("loss", "loss", ".4f"),
                       ("val_acc", "val acc", ".4f"), ("load_peak_rss_mb", "peak MiB: load", ".1f"),
                       ("train_peak_rss_mb", "after training", ".1f"),
                       ("peak_rss_mb", "after evaluation (max over ranks)", ".1f"),
                       ("rss_mb", "RSS at epoch end", ".1f")]))
    peaks = [r["peak_rss_mb"] for r in recs]
    print(f"slope over epochs {args.epochs // 2}..{args.epochs - 1}: {slope(peaks):+.2f} MiB/epoch")
    if len(peaks) > 3:
        print(f"growth after epoch 3: {growth(peaks):+.1f}% ({peaks[3]:.0f} -> {max(peaks[3:]):.0f} MiB)")
    ends = [r.get("rss_mb") for r in recs]
    if len(ends) > 3 and None not in ends:
        print(f"RSS at epoch end after epoch 3: {ends[3]:.0f} -> {ends[-1]:.0f} MiB ({ends[-1] - ends[3]:+.1f} MiB)")
    print()
    return recs


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("mpignn.bench.soak", __doc__, dataset="synthetic", ranks=2, epochs=30, precision="auto")
    parser.add_argument("--malloc", default="",
                        help="comma list of MPIGNN_MALLOC policies (default, heap, system) or preloaded allocators "
                             "(jemalloc, tcmalloc, mimalloc) to run in turn")
    parser.add_argument("extra", nargs="*", help="more mpignn.train flags (after --)")
    args = parser.parse_args(argv)
    policies = args.malloc.split(",") if args.malloc else ["default"]
    runs = {policy: soak(args, policy) for policy in policies}
    if len(runs) > 1:
        base = runs.get("heap", runs[policies[0]])
        median = lambda recs: float(np.median([r["epoch_s"] for r in recs[1:] or recs]))  # noqa: E731
        rows = [{"policy": p, "median": median(recs), "ratio": median(recs) / median(base),
                 "peak3": recs[min(3, len(recs) - 1)]["peak_rss_mb"], "peak": max(r["peak_rss_mb"] for r in recs),
                 "growth": growth([r["peak_rss_mb"] for r in recs])} for p, recs in runs.items()]
        print(table(rows, [("policy", "malloc", "s"), ("median", "median epoch s (after epoch 0)", ".2f"),
                           ("ratio", f"x {'heap' if 'heap' in runs else policies[0]}", ".3f"),
                           ("peak3", "peak MiB at epoch 3", ".0f"), ("peak", "highest peak MiB", ".0f"),
                           ("growth", "growth after epoch 3 %", "+.1f")]))
    return 0


if __name__ == "__main__":
    run_bench(main)
