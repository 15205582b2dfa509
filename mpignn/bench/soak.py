"""`python -m mpignn.bench.soak`: many epochs on several ranks; prints each epoch's peak memory (max over
ranks) and the slope of a least-squares line through the second half, to show memory does not grow.

    python -m mpignn.bench.soak --ranks 3 --epochs 20
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
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("extra", nargs="*", help="more mpignn.train flags (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as root:
        recs = run_train(args.ranks, ["--dataset", args.dataset, "--root", root, "--epochs", str(args.epochs),
                                      "--precision", args.precision, "--eval-every", "5", *args.extra])
    print(table(recs, [("epoch", "epoch", "d"), ("epoch_s", "epoch s", ".2f"), ("loss", "loss", ".4f"),
                       ("peak_rss_mb", "peak MiB (max over ranks)", ".1f")]))
    print(f"slope over epochs {args.epochs // 2}..{args.epochs - 1}: "
          f"{slope([r['peak_rss_mb'] for r in recs]):+.2f} MiB/epoch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
