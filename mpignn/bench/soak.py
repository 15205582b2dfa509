"""`python -m mpignn.bench.soak`: many epochs on several ranks; prints each epoch's peak memory (max over
ranks) where it was reached (by the end of loading, of the epoch's training, of its evaluation), the slope of a
least-squares line through the second half, and the growth after epoch 3, to show memory does not grow; and
the resident memory at each epoch's end (max over ranks), which falls where memory is given back: its growth
is memory kept (objects, or the allocator's free space), where the peak's alone may be one larger batch.

    python -m mpignn.bench.soak --ranks 2 --epochs 30
"""
from __future__ import annotations

import argparse
import tempfile

import numpy as np

from mpignn.bench._common import run_train, table


def slope(values: list[float]) -> float:
    """MiB per epoch over the second half of the run (the first epochs warm caches up)."""
    tail = values[len(values) // 2:]
    if len(tail) < 2:
        return 0.0
    return float(np.polyfit(np.arange(len(tail)), tail, 1)[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpignn.bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("extra", nargs="*", help="more mpignn.train flags (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        recs = run_train(args.ranks, ["--dataset", args.dataset, "--root", root, "--epochs", str(args.epochs),
                                      "--precision", args.precision, *args.extra])
    print(table(recs, [("epoch", "epoch", "d"), ("epoch_s", "epoch s", ".2f"), ("loss", "loss", ".4f"),
                       ("val_acc", "val acc", ".4f"), ("load_peak_rss_mb", "peak MiB: load", ".1f"),
                       ("train_peak_rss_mb", "after training", ".1f"),
                       ("peak_rss_mb", "after evaluation (max over ranks)", ".1f"),
                       ("rss_mb", "RSS at epoch end", ".1f")]))
    peaks = [r["peak_rss_mb"] for r in recs]
    print(f"slope over epochs {args.epochs // 2}..{args.epochs - 1}: {slope(peaks):+.2f} MiB/epoch")
    if len(peaks) > 3:
        print(f"growth after epoch 3: {100 * (max(peaks[3:]) / peaks[3] - 1):+.1f}% "
              f"({peaks[3]:.0f} -> {max(peaks[3:]):.0f} MiB)")
    ends = [r.get("rss_mb") for r in recs]
    if len(ends) > 3 and None not in ends:
        print(f"RSS at epoch end after epoch 3: {ends[3]:.0f} -> {ends[-1]:.0f} MiB ({ends[-1] - ends[3]:+.1f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
