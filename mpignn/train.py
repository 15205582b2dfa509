"""`mpirun -np N python -m mpignn.train`: parse, bootstrap, load this rank's part, train, report, tear down."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["main", "cli"]


def main(argv: Sequence[str] | None = None) -> int:
    from mpignn.config import parse
    from mpignn.errors import ConfigError, mark_agreed

    try:
        cfg = parse(argv)  # the same flags fail the same way on every rank, before any collective
    except ConfigError as exc:
        raise mark_agreed(exc) from None
    import logging

    import torch

    from mpignn.checkpoint import load_checkpoint, save_checkpoint
    from mpignn.loop import optimize_for_device, run_epoch, wrap_ddp
    from mpignn.models import build_model
    from mpignn.report import append_jsonl, format_epoch
    from mpignn.runtime import bootstrap, load_local_graph, make_loader, shutdown

    log = logging.getLogger("mpignn.train")
    rt = bootstrap(cfg.device, cfg.backend, cfg.threads)
    if rt.rank == 0:
        log.info("config %s", json.dumps(cfg.to_dict(), sort_keys=True))
    torch.manual_seed(cfg.seed)
    graph = load_local_graph(rt, cfg.dataset, cfg.root, partitions=cfg.partitions, method=cfg.partition_method,
                             replicated=cfg.replicated, seed=cfg.seed, fanouts=cfg.fanouts,
                             cache_size=cfg.cache_size, local_prep=cfg.local_prep, prep_timeout=cfg.prep_timeout,
                             exchange=cfg.exchange)
    loaders = {split: make_loader(rt, graph, split, batch_size=cfg.batch_size, seed=cfg.seed)
               for split in ("train", "val", "test")}
    model = build_model(cfg.model, graph.num_features, cfg.hidden, graph.num_classes, cfg.num_layers,
                        cfg.dropout).to(rt.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    first_epoch = 0
    if cfg.resume:
        first_epoch = load_checkpoint(cfg.checkpoint_dir, model, optimizer)["epoch"] + 1
        log.info("resumed from %s after epoch %d", cfg.checkpoint_dir, first_epoch - 1)
    bf16 = cfg.precision == "bf16"
    model, optimizer = optimize_for_device(model, optimizer, rt.device, bf16)
    ddp, timer = wrap_ddp(model, rt.comm, rt.device)
    log.info("%d train steps per epoch, %s", len(loaders["train"]), "bf16 autocast" if bf16 else "fp32")
    if rt.rank == 0 and cfg.checkpoint_dir:
        Path(cfg.checkpoint_dir).mkdir(parents=True, exist_ok=True)
    for epoch in range(first_epoch, cfg.epochs):
        last = epoch == cfg.epochs - 1
        rec = run_epoch(rt, epoch, ddp, optimizer, loaders, bf16=bf16, timer=timer, graph=graph,
                        evaluate_now=last or (epoch + 1) % cfg.eval_every == 0)
        if rt.rank == 0:
            log.info(format_epoch(rec))
            if cfg.metrics_out:
                append_jsonl(cfg.metrics_out, rec)
            if cfg.checkpoint_dir:
                save_checkpoint(cfg.checkpoint_dir, epoch, model, optimizer, {"config": cfg.to_dict()})
    if rt.rank == 0 and cfg.epochs > first_epoch:
        print(f"final test accuracy {rec['test_acc']:.4f} ({rt.world_size} ranks)", flush=True)
    shutdown()
    return 0


def cli() -> None:
    from mpignn.mpi import run_main

    sys.exit(run_main(main))


if __name__ == "__main__":
    cli()
