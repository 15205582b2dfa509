"""`python -m mpignn.partition`: single-process, needs no MPI."""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mpignn.config.choices import DEFAULT_METHOD, PARTITION_DEFAULT, PARTITION_METHODS, TASKS
from mpignn.config.values import check_config, opt
from mpignn.config.train_config import TrainConfig, add_fields
from mpignn.data import dataset_key, dataset_source, load_dataset
from mpignn.data.graph import GraphData
from mpignn.data.npy import load_npy_folder
from mpignn.data.split_file import apply_splits
from mpignn.data.synthetic import parse_synthetic, write_synthetic
from mpignn.env import foreign_launcher_size
from mpignn.errors import ConfigError, MpignnError
from mpignn.fileio import refuse_unwritable
from mpignn.launch.allocator import peak_rss_mb
from mpignn.mpi.run import exit_process
from mpignn.partition import format_report, partition_graph

__all__ = ["PartitionConfig", "build_parser", "main", "cli", "load_for_partitioning"]


@dataclass(frozen=True, kw_only=True)
class PartitionConfig:
    """The flags of `python -m mpignn.partition`; those it shares with training default as training's."""

    num_parts: int
    """Number of parts (= ranks of the job)."""
    out: str
    """Output folder (refused if it exists, unless --force)."""
    dataset: str = TrainConfig.dataset
    """Dataset name (as for mpignn.train)."""
    root: str = TrainConfig.root
    """Dataset root folder."""
    splits: str = TrainConfig.splits
    """An npz of int node ids `train`, `valid`, `test` in place of the dataset's own (as mpignn.train --splits)."""
    method: str = opt(PARTITION_DEFAULT, choices=(*PARTITION_METHODS, DEFAULT_METHOD))
    """metis, kaminpar (if installed), random, or auto (kaminpar if installed, else metis): as mpignn.train
    --partition-method."""
    seed: int = TrainConfig.seed
    """Seeds the partitioner and the held-out edges of --task link (training's --seed)."""
    threads: int = 0
    """kaminpar threads (0: all cores); only 1 gives the same parts for the same seed."""
    task: str = opt(TrainConfig.task, choices=TASKS)
    """link: first hold out --link-val and --link-test of the undirected edges (seeded by --seed) and store them
    in OUT/links/, for mpignn.train --task link with the same --seed and link flags."""
    link_val: float = TrainConfig.link_val
    """--task link: share of the edges held out for validation."""
    link_test: float = TrainConfig.link_test
    """--task link: share of the edges held out for testing."""
    link_tails: int = TrainConfig.link_tails
    """--task link: negative tails per held-out test edge (MRR, Hits@K)."""
    force: bool = False
    """Replace an existing output folder."""
    json: bool = False
    """Print the report as one JSON line."""

    def __post_init__(self) -> None:
        check_config(self)


def build_parser() -> argparse.ArgumentParser:
    return add_fields(argparse.ArgumentParser(
        prog="python -m mpignn.partition",
        description="Partition a graph for `mpirun -np K python -m mpignn.train --partitions OUT`."), PartitionConfig)


def load_for_partitioning(name: str, root: str, splits: str = "") -> GraphData:
    """The graph: a synthetic one generated once into an npy folder under `root` and memory-mapped from there
    (never held whole), any other as `load_dataset` returns it."""
    if not name.startswith("synthetic"):
        return load_dataset(name, root, splits=splits)
    safe = dataset_key(name).replace(":", "_").replace(",", "_").replace("=", "")
    folder = Path(root) / "mpignn-cache" / f"{safe}.npy"
    if not (folder / "meta.json").is_file():
        write_synthetic(parse_synthetic(name.partition(":")[2]), folder)
    graph = load_npy_folder(folder)
    return apply_splits(graph, splits) if splits else graph


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = PartitionConfig(**vars(build_parser().parse_args(argv)))
    except ConfigError as exc:
        print(f"mpignn.partition: error: {exc}", file=sys.stderr)
        return 2
    copies = foreign_launcher_size()
    try:
        if copies > 1:  # N copies would each partition the whole graph into the same --out folder at once
            raise ConfigError(f"expected to run as one process; got one of {copies} started by a launcher. HINT: "
                              "run it without mpirun/mpiexec/srun/torchrun: python -m mpignn.partition ...")
        if Path(args.out).exists() and not args.force:  # before loading: a synthetic graph would be generated first
            raise ConfigError(f"partition folder {args.out} already exists. HINT: pass --force to replace it, or "
                              "pick another --out")
        from mpignn.tasks import make_task

        # what the task holds out, with the same checks and parameters as mpignn.train --task T
        extras = make_task(TrainConfig(task=args.task, link_val=args.link_val, link_test=args.link_test,
                                       link_tails=args.link_tails)).partition_extras()
        links = None if extras is None else {**extras, "seed": args.seed}
        start = time.perf_counter()
        # the user's files' content before they are read (a public dataset's once loaded, after any download):
        # a file replaced while it is partitioned is then refused by training, not trusted
        source = (dataset_source(args.dataset, splits=args.splits) if args.dataset.startswith(("npz:", "npy:"))
                  else None)
        # a read-only or full disk, a file where a folder goes: one line, not a traceback
        with refuse_unwritable("--root", args.root, f"{args.dataset} can be prepared",
                               "pass a writable folder as --root (a synthetic graph is generated there, a public "
                               "dataset downloaded and cached), or one where it is already prepared"):
            graph = load_for_partitioning(args.dataset, args.root, args.splits)
        load_s = time.perf_counter() - start
        with refuse_unwritable("--out", args.out, "the partition can be written",
                               "pass an --out whose parent is a writable folder with room (not a file), e.g. "
                               "--out parts/NAME"):
            rep = partition_graph(graph, args.num_parts, args.out, method=args.method, seed=args.seed,
                                  dataset=dataset_key(args.dataset), force=args.force, threads=args.threads,
                                  links=links, source=source or dataset_source(args.dataset, args.root, args.splits))
    except MpignnError as exc:
        print(f"mpignn.partition: error: {exc}", file=sys.stderr)
        return 1
    rep["peak_rss_mb"] = peak_rss_mb()
    rep["load_seconds"] = load_s
    text = (format_report(rep) + f"\n  dataset loaded/generated in {load_s:.1f}s; peak memory "
            f"{rep['peak_rss_mb']:.0f} MiB (both steps)")
    print(json.dumps(rep) if args.json else text, flush=True)
    return 0


def cli() -> None:
    exit_process(main())
