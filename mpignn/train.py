"""`mpirun -np N python -m mpignn.train`: parse, bootstrap, load this rank's part, train, report, tear down.

Exit codes: 0 done, 1 error, 2 usage, 75 stopped by SIGUSR2 (checkpoint saved when --checkpoint-dir is set).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, Sequence

__all__ = ["main", "cli"]


def main(argv: Sequence[str] | None = None, *, keep_handler: bool = False) -> int:
    """Train; returns the exit code. The SIGUSR2 handler is put back on return unless `keep_handler`."""
    from mpignn.training.stopping import StopSignal

    # First: Slurm's warning can come while the data is still loading.
    stop = StopSignal().install()
    try:
        return _train(argv, stop)
    finally:
        if not keep_handler:
            stop.uninstall()


def _train(argv: Sequence[str] | None, stop: Any) -> int:
    from mpignn.config.train_config import TrainConfig, build_parser
    from mpignn.errors import ConfigError, DatasetError, mark_agreed

    ns = None
    try:
        ns = build_parser().parse_args(argv)
        cfg = TrainConfig.from_args(ns)  # the same flags fail the same way on every rank, before any collective
        from mpignn.data import check_known

        check_known(cfg.dataset)  # before torch is imported: a misspelt name fails in a second
        from mpignn.training.fit import check_flags, fit
        from mpignn.config.graph_options import GraphOptions
        from mpignn.tasks import make_task

        task = make_task(cfg)  # what differs between tasks, as one object the pipeline asks
        check_flags(cfg, task)
        options = GraphOptions.from_config(cfg, task)  # the graph's flags in one value, made once
    except (ConfigError, DatasetError) as exc:
        if ns is not None and ns.config:  # each rank read its own copy of the file: unagreed, so with MPI up
            from mpignn.mpi import world  # run_main aborts the job instead of leaving the others waiting

            world()
            raise
        raise mark_agreed(exc) from None
    import logging

    import torch

    from mpignn.training.minibatch import PROBE_STEPS, choose_minibatch
    from mpignn.runtime import bootstrap, build_graph_and_model, cooperative_refusal, make_loader, shutdown

    log = logging.getLogger("mpignn.train")
    rt = bootstrap(cfg.device, cfg.backend, cfg.threads, tune_process=True,  # process-wide tuning: CLI only
                   collective_timeout=cfg.collective_timeout)
    if rt.rank == 0:
        log.info("config %s", json.dumps(cfg.to_dict(), sort_keys=True))
    torch.manual_seed(cfg.seed)
    graph, model = build_graph_and_model(rt, cfg, task, options)
    loader = lambda split, mode, cap=cfg.max_steps: make_loader(  # noqa: E731
        rt, graph, split, batch_size=cfg.batch_size, batch_scope=cfg.batch_scope, seed=cfg.seed,
        prefetch=cfg.prefetch, max_steps=cap, minibatch=mode)
    if cfg.minibatch == "auto":  # measured on this run's first batches (collective)
        cap = min(cfg.max_steps or PROBE_STEPS + 1, PROBE_STEPS + 1)
        mode, _ = choose_minibatch(rt, model, lambda m: loader("train", m, cap), task=task,
                                   bf16=cfg.precision == "bf16",
                                   refusal=cooperative_refusal(graph))
        cfg = dataclasses.replace(cfg, minibatch=mode)  # what checkpoints record: a resume compares it
    loaders = {split: loader(split, cfg.minibatch) for split in ("train", "val", "test")}
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    code = fit(cfg, rt, graph, loaders, model, optimizer, stop)
    shutdown()
    return code


def cli() -> None:
    from mpignn.launch.allocator import reexec_with_hugepages
    from mpignn.mpi import run_main

    reexec_with_hugepages()  # before MPI starts: glibc reads its tunables only at start-up

    # The handler stays installed to the end, so a signal during teardown cannot kill a finished run.
    sys.exit(run_main(main, keep_handler=True))


if __name__ == "__main__":
    cli()
