"""`python -m mpignn.partition`: single-process, needs no MPI."""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from typing import Sequence

from mpignn.errors import MpignnError

__all__ = ["build_parser", "main", "cli"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mpignn.partition",
                                     description="Partition a graph for `mpirun -np K python -m mpignn.train "
                                                 "--partitions OUT`.")
    parser.add_argument("--dataset", default="synthetic", help="dataset name (as for mpignn.train)")
    parser.add_argument("--root", default="data", help="dataset root folder")
    parser.add_argument("--num-parts", type=int, required=True, help="number of parts (= ranks of the job)")
    parser.add_argument("--out", required=True, help="output folder (refused if it exists, unless --force)")
    parser.add_argument("--method", default="metis", choices=["metis", "random"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="replace an existing output folder")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mpignn.data import dataset_key, load_dataset
    from mpignn.partition import format_report, partition_graph

    try:
        start = time.perf_counter()
        graph = load_dataset(args.dataset, args.root)
        load_s = time.perf_counter() - start
        rep = partition_graph(graph, args.num_parts, args.out, method=args.method, seed=args.seed,
                              dataset=dataset_key(args.dataset), force=args.force)
    except MpignnError as exc:
        print(f"mpignn.partition: error: {exc}", file=sys.stderr)
        return 1
    rep["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rep["load_seconds"] = load_s
    text = (format_report(rep) + f"\n  dataset loaded/generated in {load_s:.1f}s; peak memory "
            f"{rep['peak_rss_mb']:.0f} MiB (both steps)")
    print(json.dumps(rep) if args.json else text, flush=True)
    return 0


def cli() -> None:
    sys.exit(main())
