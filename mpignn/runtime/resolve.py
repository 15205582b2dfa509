"""Every `auto` (or 0: "choose") flag made concrete once, from counts, never a clock, so a second run given the
resolved values as flags repeats this one (docs/reproducibility.md). Imports torch-free layers only.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, TYPE_CHECKING

from mpignn.config.train_config import TrainConfig
from mpignn.loader.prefetch import overlap, rows_on_device
from mpignn.partition.assign import DEFAULT_METHOD, default_method

if TYPE_CHECKING:
    from mpignn.launch.bootstrap import Runtime
    from mpignn.loader.local_graph import LocalGraph

__all__ = ["CHOOSE", "resolve_config", "pin_flags"]

log = logging.getLogger("mpignn.train")

CHOOSE: dict[str, Any] = {"device": "auto", "backend": "auto", "threads": 0, "exchange": "auto", "prefetch": "auto",
                          "precision": "auto", "minibatch": "auto", "sample_on": "auto", "feature_device": "auto",
                          "cache_size": "auto", "partition_method": DEFAULT_METHOD, "eval_batch_size": 0}
"""Each field that a run resolves, and the value that asks it to (the field's default)."""


def resolve_config(rt: Runtime, cfg: TrainConfig, graph: LocalGraph, minibatch: str) -> tuple[TrainConfig,
                                                                                               dict[str, Any]]:
    """Collective over `rt.comm`: return `cfg` with its `CHOOSE` fields made concrete, and those alone.

    Args:
        minibatch: the mode `--minibatch auto` (or tune) chose, or the one given.
    """
    features = graph.features
    talks = rt.world_size > 1 and not graph.replicated
    prefetch = cfg.prefetch
    if prefetch == "auto":
        prefetch = "on" if overlap(rt, talks, "auto", device_exchange=rows_on_device(features)) else "off"
    concrete = {
        "device": rt.choice.device_type, "backend": rt.choice.backend, "threads": rt.threads,
        # `runtime.graph._sources`: a table on the device travels by torch.distributed, else by MPI
        "exchange": "mpi" if features.on_host else "torch",
        "prefetch": prefetch, "precision": "fp32", "minibatch": minibatch, "sample_on": "host",
        "feature_device": "host" if features.on_host else "device", "cache_size": int(graph.cache_rows),
        "partition_method": default_method(),
        "eval_batch_size": graph.task.eval_factor * cfg.batch_size,
    }
    resolved = {name: concrete[name] for name, ask in CHOOSE.items() if getattr(cfg, name) == ask}
    if minibatch != cfg.minibatch:
        resolved["minibatch"] = minibatch
    views = rt.comm.allgather(resolved) if rt.world_size > 1 else [resolved]
    differ = sorted({k for view in views for k, v in view.items() if v != resolved.get(k)})
    if differ and rt.rank == 0:  # e.g. hosts with other core counts: the config line shows rank 0's
        log.warning("ranks resolved %s differently: %s", ", ".join(differ),
                    "; ".join(f"rank {r}: " + ", ".join(f"{k}={view.get(k)}" for k in differ)
                              for r, view in enumerate(views)))
    return dataclasses.replace(cfg, **resolved), resolved


def pin_flags(resolved: dict[str, Any]) -> str:
    """Return the flags that give a second run the values this one resolved."""
    return " ".join(f"--{name.replace('_', '-')} {value}" for name, value in resolved.items())
