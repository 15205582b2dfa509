"""One training run of `python -m mpignn.train`, from a checked config to its exit code. Every collective is
bounded (a dead rank is named, not a hang); every `auto` (or 0) flag is made concrete once, from counts, never a
clock, so a run given the resolved values as flags repeats this one (docs/reproducibility.md)."""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable

import torch

from mpignn import __version__
from mpignn.config.train_config import TrainConfig, check_fits
from mpignn.errors import ConfigError, mark_agreed
from mpignn.launch.allocator import keep_big_blocks
from mpignn.launch.bootstrap import Runtime, bootstrap, shutdown
from mpignn.loader.local_graph import LocalGraph
from mpignn.loader.prefetch import overlap, rows_on_device
from mpignn.mpi import check_same
from mpignn.mpi.collectives import checked
from mpignn.mpi.watchdog import bounded
from mpignn.partition.assign import DEFAULT_METHOD, default_method
from mpignn.runtime.graph import build_graph_and_model
from mpignn.training.loaders import cooperative_refusal, full_fit_problem, make_loader
from mpignn.tasks import Task
from mpignn.training.fit import fit, resumed_minibatch, wants_resume
from mpignn.training.minibatch import PROBE_STEPS, choose_minibatch, tune_minibatch
from mpignn.training.optim import adam
from mpignn.training.stopping import StopSignal

__all__ = ["CHOOSE", "train_run", "resolve_config"]

log = logging.getLogger("mpignn.train")

CHOOSE: dict[str, Any] = {"device": "auto", "backend": "auto", "threads": 0, "exchange": "auto", "prefetch": "auto",
                          "precision": "auto", "minibatch": "auto", "sample_on": "auto", "feature_device": "auto",
                          "cache_size": "auto", "partition_method": DEFAULT_METHOD, "eval_batch_size": 0}
"""Each field that a run resolves, and the value that asks it to (the field's default)."""


def train_run(cfg: TrainConfig, task: Task, stop: StopSignal | None = None) -> int:
    """Collective over COMM_WORLD: train as `cfg` says; returns the exit code (`fit`'s)."""
    rt = bootstrap(cfg.device, cfg.backend, cfg.threads, tune_process=True,  # process-wide tuning: CLI only
                   collective_timeout=cfg.collective_timeout)
    torch.manual_seed(cfg.seed)
    # before anything that depends on it: ranks that read other --config files, or hosts whose installed
    # mpignn has other defaults, would deadlock in the cache's all-to-all or train different replicas
    check_same(rt.comm, {"mpignn version": __version__, **cfg.to_dict()}, "configuration",
               "give every rank the same flags and --config file, and install the same mpignn on every host",
               ConfigError)
    # the model and one step against each host's memory, before the data loads
    with checked(rt.comm, ConfigError, ConfigError):
        check_fits(cfg, world_size=rt.world_size, ranks_on_host=rt.topo.local_size)
    with bounded("start-up: the dataset's preparation, this rank's part and its cache",
                 limit=cfg.prep_timeout + cfg.collective_timeout):
        graph, model = build_graph_and_model(rt, cfg, task)
    loader = lambda split, mode, cap=cfg.max_steps: make_loader(  # noqa: E731
        rt, graph, split, batch_size=cfg.batch_size, batch_scope=cfg.batch_scope, seed=cfg.seed,
        prefetch=cfg.prefetch, max_steps=cap, minibatch=mode, eval_batch_size=cfg.eval_batch_size)
    resuming = wants_resume(cfg, rt.comm)
    mode = _minibatch(rt, cfg, graph, model, task, loader, resuming)
    cfg, resolved = resolve_config(rt, cfg, graph, mode)
    if rt.rank == 0:  # what runs, every `auto` made concrete: a second run given these flags repeats it
        log.info("config %s", json.dumps(cfg.to_dict(), sort_keys=True))
        if resolved:
            log.info("resolved (pin them to repeat this run anywhere): %s",
                     " ".join(f"--{name.replace('_', '-')} {value}" for name, value in resolved.items()))
    loaders: dict[str, Any] = {split: loader(split, cfg.minibatch) for split in ("train", "val", "test")}
    if cfg.minibatch == "full":  # one fixed batch: every epoch allocates the same blocks
        keep_big_blocks()
    optimizer = adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    code = fit(cfg, rt, graph, loaders, model, optimizer, stop, resolved=resolved, resuming=resuming)
    shutdown()
    return code


def _minibatch(rt: Runtime, cfg: TrainConfig, graph: LocalGraph, model: torch.nn.Module, task: Task,
               loader: Callable[..., Any], resuming: bool) -> str:
    """Collective over `rt.comm`: return the mode that trains; `auto` and `tune` keep a resumed checkpoint's."""
    full_problem = ""
    if cfg.minibatch in ("auto", "tune", "full"):  # the whole neighbourhood in one step: where it can, and fits
        full_problem = full_fit_problem(rt, graph, model)  # collective
        if full_problem and cfg.minibatch == "full":
            raise mark_agreed(ConfigError(full_problem))
    if cfg.minibatch not in ("auto", "tune"):
        return cfg.minibatch
    mode = resumed_minibatch(cfg, rt.comm) if resuming else ""
    if (mode == "cooperative" and (rt.world_size == 1 or cooperative_refusal(graph))) or \
            (mode == "full" and full_problem):
        mode = ""  # that mode cannot train this run (other ranks, other flags): choose again
    if mode:
        if rt.rank == 0:
            log.info("--minibatch %s: %s (the checkpoint's: the resumed run trains as it did)", cfg.minibatch, mode)
        return mode
    if cfg.minibatch == "tune":
        cap = min(cfg.max_steps or PROBE_STEPS + 1, PROBE_STEPS + 1)
        mode, _ = tune_minibatch(rt, model, lambda m: loader("train", m, cap), task=task,
                                 bf16=cfg.precision == "bf16", refusal=cooperative_refusal(graph),
                                 num_nodes=graph.part.meta.num_nodes, full_refusal=full_problem)
        return mode
    in_width = 0 if full_problem else graph.num_features  # full_problem: a heterogeneous graph among others
    mode, why = choose_minibatch(rt, lambda m: loader("train", m, 1), in_width=in_width, hidden=cfg.hidden,
                                 num_nodes=graph.part.meta.num_nodes, full_refusal=full_problem)
    if rt.rank == 0:
        log.info("--minibatch auto: %s (%s)", mode, why)
    return mode


def resolve_config(rt: Runtime, cfg: TrainConfig, graph: LocalGraph, minibatch: str) -> tuple[TrainConfig,
                                                                                               dict[str, Any]]:
    """Collective over `rt.comm`: return `cfg` with its `CHOOSE` fields made concrete (`minibatch`: the mode
    chosen or given), and those alone."""
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
