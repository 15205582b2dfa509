"""`mpirun -np N python -m mpignn.predict --checkpoint-dir DIR --out OUT`: parse, bootstrap, rebuild the trained
run, infer every node exactly, write the predictions folder. Exit codes: 0 done, 1 error, 2 usage.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import asdict, dataclass
from typing import Sequence

from mpignn.config.choices import EXCHANGES
from mpignn.config.train_config import TrainConfig, add_fields
from mpignn.config.values import check_config, opt
from mpignn.errors import ConfigError, agreed
from mpignn.mpi.run import exit_process, run_main

__all__ = ["PredictConfig", "build_parser", "main", "cli"]


@dataclass(frozen=True, kw_only=True)
class PredictConfig:
    checkpoint_dir: str
    """The --checkpoint-dir of the training run."""
    out: str
    """The predictions folder to write (replaced only with --force, and only once complete)."""
    generation: str = "latest"
    """Which checkpoint: latest, best (the best validation epoch's) or a gen-NNNNNN folder's name."""
    force: bool = False
    """Replace an existing --out."""
    logits: bool = False
    """Also write the last layer's rows (logits.npy)."""
    emb_layer: int = -1
    """Layer whose rows emb.npy holds: 0 the input rows .. L the last; -1: the task's default (node
    classification: the last hidden layer; link prediction: the last layer)."""
    pairs: str = ""
    """An npy of node pairs (original ids, [P, 2]) to score with a link prediction checkpoint's decoder."""
    chunk_size: int = opt(8192, accepts=lambda v: v >= 1, problem="must be a positive int", hint="e.g. 8192")
    """Target nodes per block: bounds the source rows a rank assembles at once."""
    halo_mib: float = opt(256.0, accepts=lambda v: v >= 0, problem="must be >= 0", hint="e.g. 256 (0: per block)")
    """Remote rows a rank holds at once (MiB): consecutive blocks' remote sources are fetched together up to
    this, each row once per layer (0: each block's on its own, crossing once per block that reads it)."""
    root: str = ""
    """Data folder (empty: the training run's --root)."""
    partitions: str = ""
    """Partition folder (empty: the training run's, or one made for this number of ranks as training does)."""
    exchange: str = opt("", choices=(*EXCHANGES, ""))
    """Row transport: auto, mpi or torch (empty: the training run's)."""
    device: str = "auto"
    backend: str = "auto"
    threads: int = opt(0, accepts=lambda v: v >= 0, problem="must be >= 0", hint="0 means automatic")
    """Threads per rank (0: the cores of the host over its ranks)."""
    collective_timeout: float = opt(300.0, accepts=lambda v: 0 < v < math.inf, problem="must be positive seconds",
                                    hint="e.g. 300")
    """Seconds any collective may take before the job ends, naming the ranks that stopped answering."""

    def __post_init__(self) -> None:
        check_config(self)


def build_parser() -> argparse.ArgumentParser:
    """Flags for every PredictConfig field; defaults stay in the dataclass."""
    return add_fields(argparse.ArgumentParser(prog="python -m mpignn.predict", description="Exact predictions and "
                                              "embeddings for every node of a trained run"), PredictConfig)


def main(argv: Sequence[str] | None = None) -> int:
    """Predict; returns the exit code."""
    with agreed(ConfigError):
        cfg = PredictConfig(**vars(build_parser().parse_args(argv)))
    from mpignn.mpi.watchdog import bounded
    from mpignn.predict.output import check_out
    from mpignn.predict.restore import OVERRIDABLE, restore_run
    from mpignn.predict.run import predict_to
    from mpignn.runtime import bootstrap, shutdown

    rt = bootstrap(cfg.device, cfg.backend, cfg.threads, collective_timeout=cfg.collective_timeout)
    if rt.rank == 0:
        logging.getLogger("mpignn.predict").info("config %s", json.dumps(asdict(cfg), sort_keys=True))
    check_out(rt.comm, cfg.out, cfg.force)  # before any data is loaded
    long_wait = TrainConfig.prep_timeout + cfg.collective_timeout  # while every rank still answers
    with bounded("restoring the run: its partition, part and model", limit=long_wait):
        run = restore_run(rt, cfg.checkpoint_dir, cfg.generation, {k: getattr(cfg, k) for k in OVERRIDABLE})
    with bounded("the layer-wise inference and its output", limit=long_wait):
        out = predict_to(rt, run, cfg.out, emb_layer=cfg.emb_layer, logits=cfg.logits, chunk=cfg.chunk_size,
                         pairs=cfg.pairs, halo_mib=cfg.halo_mib)
    if rt.rank == 0:
        print(f"predictions of {run.generation} (epoch {run.epoch}) for {run.graph.part.meta.num_nodes} nodes "
              f"in {out}", flush=True)
    shutdown()
    return 0


def cli() -> None:
    exit_process(run_main(main))


if __name__ == "__main__":
    cli()
