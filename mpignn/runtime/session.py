"""One training run of `python -m mpignn.train`, from a checked config to its exit code: bootstrap, agree on the
configuration, build the graph, the model and the loaders, fit, tear down. Every collective on the way is bounded
(the start-up by --collective-timeout, the data's preparation by --prep-timeout on top), so a rank that stops
or dies ends the job with its name instead of a hang.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from typing import Any, Iterator

import torch

from mpignn import __version__
from mpignn.config.graph_options import GraphOptions
from mpignn.config.train_config import TrainConfig, check_fits, classic_options, default_dropout
from mpignn.errors import ConfigError, mark_agreed
from mpignn.launch.allocator import keep_big_blocks
from mpignn.launch.bootstrap import Runtime, bootstrap, shutdown
from mpignn.mpi import check_all, check_same
from mpignn.mpi.watchdog import Deadline, Watchdog, bounded
from mpignn.runtime.graph import build_graph_and_model, build_model
from mpignn.runtime.loaders import cooperative_refusal, full_fit_problem, make_loader
from mpignn.tasks import Task
from mpignn.training.fit import fit, resumed_minibatch
from mpignn.training.minibatch import PROBE_STEPS, choose_minibatch
from mpignn.training.optim import adam
from mpignn.training.stopping import StopSignal

__all__ = ["train_run", "watched"]

log = logging.getLogger("mpignn.train")


@contextlib.contextmanager
def watched(rt: Runtime, timeout: float) -> Iterator[None]:
    """Collective over `rt.comm` (on several ranks): a Watchdog bounds every collective of the block; its own
    set-up (a collective) is bounded by a `Deadline`."""
    if rt.world_size == 1:
        yield
        return
    with Deadline(timeout, "the watchdog's set-up (a collective)", rt.rank, "a rank stopped or died during "
                  "start-up: look at every host's processes"):
        dog = Watchdog(rt.comm, timeout)
    with dog:
        yield


def with_classic(cfg: TrainConfig, task: Task, mode: str, say: bool = False) -> TrainConfig:
    """`cfg` with the model options --classic adds in `mode` (what checkpoints record), given to `task`, which
    builds the model; `cfg` itself where it adds none. `say`: log what it adds."""
    extra = classic_options(cfg, mode)
    if not extra:
        return cfg
    if say:
        log.info("--classic auto: full-graph training adds %s (--classic off: only the flags given)",
                 " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in extra.items()))
    cfg = dataclasses.replace(cfg, **extra)
    task.with_model_options(cfg)
    return cfg


def train_run(cfg: TrainConfig, task: Task, options: GraphOptions, stop: StopSignal | None = None) -> int:
    """Collective over COMM_WORLD: train as `cfg` says; returns the exit code (`fit`'s)."""
    rt = bootstrap(cfg.device, cfg.backend, cfg.threads, tune_process=True,  # process-wide tuning: CLI only
                   collective_timeout=cfg.collective_timeout)
    torch.manual_seed(cfg.seed)
    with watched(rt, cfg.collective_timeout):
        # before anything that depends on it: ranks that read other --config files, or hosts whose installed
        # mpignn has other defaults, would deadlock in the cache's all-to-all or train different replicas
        check_same(rt.comm, {"mpignn version": __version__, **cfg.to_dict()}, "configuration",
                   "give every rank the same flags and --config file, and install the same mpignn on every host",
                   ConfigError)
        if rt.rank == 0:
            log.info("config %s", json.dumps(cfg.to_dict(), sort_keys=True))
        problem = ""
        try:  # the model and one step against each host's memory, before the data loads
            check_fits(cfg, world_size=rt.world_size, ranks_on_host=rt.topo.local_size)
        except ConfigError as exc:
            problem = str(exc)
        check_all(rt.comm, not problem, problem, ConfigError)
        cfg = with_classic(cfg, task, cfg.minibatch, rt.rank == 0)
        with bounded("start-up: the dataset's preparation, this rank's part and its cache",
                     limit=cfg.prep_timeout + cfg.collective_timeout):
            graph, model = build_graph_and_model(rt, cfg, task, options)
        loader = lambda split, mode, cap=cfg.max_steps: make_loader(  # noqa: E731
            rt, graph, split, batch_size=cfg.batch_size, batch_scope=cfg.batch_scope, seed=cfg.seed,
            prefetch=cfg.prefetch, max_steps=cap, minibatch=mode, eval_batch_size=cfg.eval_batch_size)
        if cfg.minibatch in ("auto", "full"):  # the whole neighbourhood in one step: where it can, and fits
            full_problem = full_fit_problem(rt, graph, model)  # collective
            if full_problem and cfg.minibatch == "full":
                raise mark_agreed(ConfigError(full_problem))
        if cfg.minibatch == "auto":  # a resume continues its checkpoint's mode; else measured (collective)
            mode = resumed_minibatch(cfg, rt.comm)
            if (mode == "cooperative" and (rt.world_size == 1 or cooperative_refusal(graph))) or \
                    (mode == "full" and full_problem):
                mode = ""  # that mode cannot train this run (other ranks, other flags): time them again
            if mode and rt.rank == 0:
                log.info("--minibatch auto: %s (the checkpoint's: the resumed run trains as it did)", mode)
            if not mode:
                cap = min(cfg.max_steps or PROBE_STEPS + 1, PROBE_STEPS + 1)
                mode, _ = choose_minibatch(rt, model, lambda m: loader("train", m, cap), task=task,
                                           bf16=cfg.precision == "bf16", refusal=cooperative_refusal(graph),
                                           num_nodes=graph.part.meta.num_nodes, full_refusal=full_problem)
            cfg = dataclasses.replace(cfg, minibatch=mode)  # what checkpoints record: a resume compares it
            classic = with_classic(cfg, task, mode, rt.rank == 0)
            if classic is not cfg:  # full-graph training's model, built as a run given --minibatch full builds it
                cfg = classic
                torch.manual_seed(cfg.seed)
                model = build_model(rt, cfg, task, graph)
        if cfg.dropout is None:  # its default follows the mode that trains: what checkpoints record
            cfg = dataclasses.replace(cfg, dropout=default_dropout(cfg.minibatch))
            getattr(model, "module", model).dropout = cfg.dropout
        loaders: dict[str, Any] = {split: loader(split, cfg.minibatch) for split in ("train", "val", "test")}
        if cfg.minibatch == "full":  # one fixed batch: every epoch allocates the same blocks
            keep_big_blocks()
        optimizer = adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        code = fit(cfg, rt, graph, loaders, model, optimizer, stop)
    shutdown()
    return code
