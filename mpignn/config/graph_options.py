"""`GraphOptions`: the graph's section of the training config (`TrainConfig` extends it) and the keywords of
`runtime.load_local_graph`, so the CLI and the API default and refuse alike. Frozen: made, checked, then only
read. Stdlib only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from mpignn.config.choices import (DEFAULT_METHOD, EXCHANGES, FEATURE_DEVICES, FEATURE_DTYPES, FEATURE_NORMS,
                                   PARTITION_DEFAULT, PARTITION_METHODS, SAMPLE_ON, SAMPLERS, parse_cache_size)
from mpignn.config.refusals import check_combinations
from mpignn.config.values import check_config, opt
from mpignn.errors import ConfigError

__all__ = ["GraphOptions", "parse_fanout", "parse_edge_fanout"]


def parse_fanout(text: str | Sequence[int]) -> list[int]:
    """Parse '15,10,5' (or [15, 10, 5]) into [15, 10, 5]; -1 means all neighbours."""
    if not isinstance(text, str) and any(isinstance(v, (str, bool)) for v in text):
        raise ConfigError(f"config key fanout (--fanout) expected a string; got {text!r} ({type(text).__name__}). "
                          "HINT: --fanout 15,10,5, or in TOML fanout = \"15,10,5\" or [15, 10, 5]")
    try:
        values = [int(v) for v in (text.split(",") if isinstance(text, str) else text)]
    except (TypeError, ValueError):
        values = []
    if not values or any(v == 0 or v < -1 for v in values):
        raise ConfigError(f"--fanout must list one positive int (or -1 for all) per layer; got '{text}'. "
                          "HINT: use e.g. --fanout 15,10,5")
    return values


def parse_edge_fanout(text: str | Mapping[str, Sequence[int]], layers: int) -> dict[str, list[int]]:
    """Parse `TYPE=F1,F2;TYPE=...` (or {TYPE: fanouts}) into {TYPE: fanouts}, each as long as --fanout.
    The types are checked once the graph loads (`data.hetero.hop_fanouts`)."""
    if isinstance(text, Mapping):
        items = [(f"{k}={v}", str(k), v) for k, v in text.items()]
    elif not isinstance(text, str):
        raise ConfigError(f"config key edge_fanout (--edge-fanout) expected a string; got {text!r} "
                          f"({type(text).__name__}). HINT: --edge-fanout 'TYPE=5,5', or in TOML a table [edge_fanout]")
    else:
        items = [(part, *part.partition("=")[::2]) for part in map(str.strip, text.split(";")) if part]
    out: dict[str, list[int]] = {}
    for item, name, values in items:
        try:
            fan = parse_fanout(values) if name.strip() and "=" in item else []
        except ConfigError:
            fan = []
        if len(fan) != layers:
            raise ConfigError(f"--edge-fanout takes TYPE=F1,...,F{layers} (one fanout per layer, as --fanout); "
                              f"got '{item}'. HINT: e.g. --edge-fanout 'actor__to__movie={','.join(['5'] * layers)}'")
        out[name.strip()] = fan
    return out


@dataclass(frozen=True, kw_only=True)
class GraphOptions:
    """The graph's flags: data source, partition, sampling, cache and exchange, features. A value the matching
    `python -m mpignn.train` flag refuses is refused here with the same message."""

    dataset: str = "synthetic"
    """`synthetic[:key=value,...]`, `npz:PATH`, `npy:FOLDER`, or a public graph by name: Cora, Amazon-Photo,
    Coauthor-CS, WikiCS, Reddit, ogbn-arxiv, ... (all in docs/datasets.md)."""
    root: str = "data"
    """Folder for downloaded datasets, preprocessed caches and automatic partitions."""
    splits: str = ""
    """An npz of int node ids `train`, `valid`, `test`: fixed splits in place of the dataset's own (any dataset;
    checked; part of what a prepared partition is matched by). Empty: the dataset's."""
    local_prep: bool = False
    """Prepare the dataset on rank 0 of every host (node-local disks) instead of global rank 0."""
    partitions: str = ""
    """A partition folder from `python -m mpignn.partition`; empty: partition on rank 0 under --root."""
    force: bool = False
    """Let partition delivery replace what sits at the partition path on a host even when it is not an mpignn
    partition folder (refused otherwise, so nothing mpignn did not write is deleted)."""
    partition_method: str = opt(PARTITION_DEFAULT, choices=(*PARTITION_METHODS, DEFAULT_METHOD))
    """metis (the default: always installed, the same parts for a seed on every machine), kaminpar (pip install
    kaminpar; faster on graphs of millions of nodes), random, or auto (kaminpar if installed)."""
    replicated: bool = False
    """Keep the whole graph on every rank and split the training nodes (small graphs)."""
    seed: int = opt(0, accepts=lambda v: 0 <= v < 2 ** 63, problem="must be an int in [0, 2**63)")
    """Random seed: initial weights, batch order and sampling, dropout, held-out links, automatic partition."""
    prep_timeout: float = opt(3600.0, accepts=lambda v: 0 < v < math.inf, problem="must be positive seconds")
    """Seconds the other ranks wait for rank 0 to prepare the dataset before giving up."""
    fanout: str | Sequence[int] = "15,10,5"
    """Neighbours sampled per layer, outermost last; -1 takes all (leading -1: write --fanout=-1,-1, or
    argparse reads the value as a flag). Its length is the number of layers."""
    edge_fanout: str | Mapping[str, Sequence[int]] = ""
    """Heterogeneous graphs: fanouts of some edge types in place of --fanout, as TYPE=F1,F2,... per edge type
    (TYPE is src__relation__dst, e.g. actor__to__movie=5,5), several separated by ';'."""
    sampler: str = opt("neighbor", choices=SAMPLERS)
    """neighbor: each target draws its own --fanout neighbours; labor: layer-neighbour sampling, targets sharing a
    neighbour agree on it, so fewer rows a step (docs/training.md)."""
    batch_dependency: int = opt(1, accepts=lambda v: v >= 1, problem="must be a positive int")
    """--sampler labor: K consecutive training steps share their variates, each rotating them by 1/K, so their
    sampled sets overlap and rows the last batch brought are not fetched again (docs/training.md)."""
    layer_dependency: bool = False
    """--sampler labor: every hop of a batch draws the same variate for a node (DGL's layer_dependency), so a
    node kept at one hop tends to be kept at the next: fewer rows a step (docs/training.md)."""
    labor_iterations: int = opt(0, accepts=lambda v: 0 <= v <= 16, problem="must be in [0, 16]",
                                hint="e.g. --labor-iterations 3, or 0 for LABOR-0")
    """--sampler labor: LABOR-i's importance-sampling iterations, which concentrate a hop on fewer sources
    (each edge weighted; --model sage or gcn); 0: LABOR-0 (docs/training.md)."""
    sample_on: str = opt("auto", choices=SAMPLE_ON)
    """Where hops are drawn: host (numba kernels) or device (torch ops on the compute device; the same draws).
    auto: host, until the device's step is measured (docs/launchers-and-devices.md)."""
    feature_device: str = opt("auto", choices=FEATURE_DEVICES)
    """Where feature rows live: host (pinned copies each step) or device (gathered there). auto: device for one
    part where they fit in free device memory (docs/launchers-and-devices.md)."""
    cache_size: int | str = "auto"
    """Remote nodes whose feature rows each rank caches, most-fetched first. auto: a quarter of the host's
    available memory over its ranks (docs/launchers-and-devices.md); N: at most N rows; 0: none."""
    exchange: str = opt("auto", choices=EXCHANGES)
    """How remote features travel: auto or mpi (mpi4py on host buffers, the fastest here), or torch
    (torch.distributed all_to_all on the DDP backend: NCCL/xccl device tensors, gloo on CPU)."""
    feature_norm: str = opt("none", choices=FEATURE_NORMS)
    """row: scale each node's features to sum 1, by their owner (PyG's NormalizeFeatures; raw bag-of-words
    counts lose link AUC on Cora: docs/tasks.md); none: as stored."""
    feature_dtype: str = opt("fp32", choices=FEATURE_DTYPES)
    """fp32, fp16 or bf16: how each rank holds its feature rows, its cache and the rows it exchanges (half
    the memory and the bytes; each batch is widened to float32 on the device). The partition stays fp32."""

    def __post_init__(self) -> None:
        """Types first (a TOML `hidden = 64.5`), then each value beside its field, then combinations."""
        check_config(self, self._canonical)
        check_combinations(self.to_dict())  # every refused pair of flags, shared with the API (config.refusals)

    def _canonical(self) -> None:
        """Fanouts as the flags' text, so configs compare alike across ranks and checkpoints."""
        fanouts = parse_fanout(self.fanout)
        object.__setattr__(self, "fanout", ",".join(map(str, fanouts)))
        per_type = parse_edge_fanout(self.edge_fanout, len(fanouts))
        object.__setattr__(self, "edge_fanout", ";".join(f"{k}={','.join(map(str, v))}" for k, v in per_type.items()))
        object.__setattr__(self, "cache_size", parse_cache_size(self.cache_size))

    @property
    def fanouts(self) -> list[int]:
        return parse_fanout(self.fanout)

    @property
    def edge_fanouts(self) -> dict[str, list[int]]:
        return parse_edge_fanout(self.edge_fanout, len(self.fanouts))

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def link_params(self, extras: dict[str, Any] | None) -> dict[str, Any] | None:
        """Return what the partitioner holds out (the task's `partition_extras()` and the seed), or None."""
        return None if extras is None else {**extras, "seed": self.seed}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
