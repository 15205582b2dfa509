"""Training configuration: one dataclass, its parser, and validation. Stdlib only.

Every default lives in the dataclass; precedence is defaults < `--config file.toml` < flags.
"""
from __future__ import annotations

import argparse
import dataclasses
import tomllib
from dataclasses import dataclass, fields
from typing import Any, Sequence

from mpignn.errors import ConfigError

__all__ = ["TrainConfig", "build_parser", "parse", "parse_fanout"]


def parse_fanout(text: str | Sequence[int]) -> list[int]:
    """'15,10,5' -> [15, 10, 5]; -1 means all neighbours."""
    try:
        values = [int(v) for v in (text.split(",") if isinstance(text, str) else text)]
    except ValueError:
        values = []
    if not values or any(v == 0 or v < -1 for v in values):
        raise ConfigError(f"--fanout must list one positive int (or -1 for all) per layer; got '{text}'. "
                          "HINT: use e.g. --fanout 15,10,5")
    return values


@dataclass(kw_only=True)
class TrainConfig:
    dataset: str = "synthetic"
    """`synthetic[:key=value,...]`, `npz:PATH`, Cora, CiteSeer, PubMed, ogbn-arxiv, ogbn-products, ogbn-papers100M."""
    root: str = "data"
    """Folder for downloaded datasets, preprocessed caches and automatic partitions."""
    local_prep: bool = False
    """Prepare the dataset on rank 0 of every host (node-local disks) instead of global rank 0."""
    epochs: int = 5
    """Passes over the training nodes (the embedded graph plateaus by then on 1 or 2 ranks)."""
    batch_size: int = 1024
    fanout: str = "15,10,5"
    """Neighbours sampled per layer, outermost last; -1 takes all. Its length is the number of layers."""
    hidden: int = 256
    lr: float = 0.003
    dropout: float = 0.0
    """Dropout between layers. Off by default: on CPU its random masks cost as much as the matmuls."""
    weight_decay: float = 0.0
    """L2 penalty of Adam."""
    model: str = "sage"
    """sage (GraphSAGE), gcn or gat."""
    seed: int = 0
    partitions: str = ""
    """A partition folder from `python -m mpignn.partition`; empty: partition on rank 0 under --root."""
    partition_method: str = "metis"
    replicated: bool = False
    """Keep the whole graph on every rank and split the training nodes (small graphs)."""
    cache_size: int = 50_000
    """Remote nodes whose features each rank caches (hottest halo nodes first); 0 disables the cache."""
    device: str = "auto"
    backend: str = "auto"
    """torch.distributed backend for DDP: auto, gloo, mpi, nccl, xccl, ccl."""
    exchange: str = "auto"
    """How remote features travel: auto or mpi (mpi4py on host buffers, the fastest here), or torch
    (torch.distributed all_to_all on the DDP backend: NCCL/xccl device tensors, gloo on CPU)."""
    threads: int = 0
    """Threads per rank; 0: the host's cores divided by its ranks."""
    precision: str = "auto"
    """fp32, bf16 (autocast: 1.7x faster epochs on CPUs with bf16 matrix units, same accuracy in
    `python -m mpignn.bench.epoch`, but a peak that grows over the first epochs: see the README), or auto
    (= fp32)."""
    eval_every: int = 1
    """Evaluate val/test every N epochs (and always after the last)."""
    metrics_out: str = ""
    """Append one JSON line per epoch to this file."""
    checkpoint_dir: str = ""
    """Save model and optimizer after each epoch here (rank 0, atomically)."""
    resume: bool = False
    """Continue from the last checkpoint in --checkpoint-dir."""
    prep_timeout: float = 3600.0
    """Seconds the other ranks wait for rank 0 to prepare the dataset before giving up."""

    def __post_init__(self) -> None:
        self.fanouts = parse_fanout(self.fanout)
        positive = {"epochs": self.epochs, "batch_size": self.batch_size, "hidden": self.hidden,
                    "eval_every": self.eval_every}
        for name, value in positive.items():
            if value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be a positive int; got {value}. "
                                  f"HINT: e.g. --{name.replace('_', '-')} {getattr(TrainConfig, name)}")
        if not self.lr > 0:
            raise ConfigError(f"--lr must be positive; got {self.lr}. HINT: e.g. --lr 0.003")
        if self.cache_size < 0 or self.threads < 0:
            raise ConfigError("--cache-size and --threads must be >= 0. HINT: 0 means off / automatic")
        choices = {"precision": ("auto", "fp32", "bf16"), "exchange": ("auto", "mpi", "torch"),
                   "partition_method": ("metis", "random"), "model": ("sage", "gcn", "gat")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"--{name.replace('_', '-')} must be one of {', '.join(allowed)}; got "
                                  f"'{getattr(self, name)}'. HINT: --{name.replace('_', '-')} {allowed[0]}")
        if self.resume and not self.checkpoint_dir:
            raise ConfigError("--resume needs --checkpoint-dir. HINT: pass the folder of the earlier run")
        if self.partitions and self.replicated:
            raise ConfigError("--partitions and --replicated exclude each other. HINT: drop one")

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> "TrainConfig":
        values: dict[str, Any] = {}
        if getattr(ns, "config", None):
            try:
                with open(ns.config, "rb") as f:
                    values.update(tomllib.load(f))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"cannot read --config {ns.config}: {exc}. HINT: a TOML file of key = value")
        values.update({k: v for k, v in vars(ns).items() if k != "config"})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown config key(s) {', '.join(unknown)}. HINT: keys are the flag names with _")
        return cls(**values)


def _field_docs() -> dict[str, str]:
    """The docstrings written under each field (read from the source, as torchtitan does)."""
    import ast
    import inspect

    docs: dict[str, str] = {}
    tree = ast.parse(inspect.getsource(TrainConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())  # type: ignore[attr-defined]
    return docs


def build_parser() -> argparse.ArgumentParser:
    """Flags for every TrainConfig field; defaults stay in the dataclass (argparse gets SUPPRESS)."""
    parser = argparse.ArgumentParser(prog="python -m mpignn.train",
                                     description="Distributed GNN training: mpirun -np N python -m mpignn.train")
    parser.add_argument("--config", help="TOML file of defaults (flags win)")
    docs = _field_docs()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else None
        text = f"{docs.get(f.name, '')} (default: {default!r})".strip()
        if f.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", default=argparse.SUPPRESS, help=text)
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            parser.add_argument(flag, type=kind, default=argparse.SUPPRESS, help=text)
    return parser


def parse(argv: Sequence[str] | None = None) -> TrainConfig:
    return TrainConfig.from_args(build_parser().parse_args(argv))
