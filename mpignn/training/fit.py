"""The epoch loop of `python -m mpignn.train`: resume, train, evaluate, keep the best validation epoch, save
checkpoints, and stop in agreement on SIGUSR2. Built on loop, checkpoint, report and stopping; imports torch.
"""
from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Any, TYPE_CHECKING

import torch

from mpignn.config.refusals import check_combinations
from mpignn.config.choices import MINIBATCH_MODES
from mpignn.errors import MpignnError
from mpignn.training.checkpoint import checkpoint_config, resume_state, save_state
from mpignn.training.checkpoint_hosts import bring_generation
from mpignn.training import converge
from mpignn.launch.device import cpu_lacks_bf16_units
from mpignn.training.ddp import optimize_for_device, wrap_ddp
from mpignn.training.epoch import run_epoch
from mpignn.training.report import BestEpoch, format_epoch, format_final
from mpignn.training.run_files import (check_outputs, claim_checkpoint_dir, generation_bytes, keep_best, on_behalf,
                                       report_epoch)
from mpignn.training.schedule import attach_lr_schedule
from mpignn.training.stopping import EXIT_STOPPED, StopSignal, requeue
from mpignn.tasks import Task
from mpignn.training.tensorboard import ScalarLog, eval_index, require
from mpignn.mpi import allreduce_max
from mpignn.mpi.watchdog import Watchdog, bounded, watching

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig
    from mpignn.launch.bootstrap import Runtime
    from mpignn.loader.local_graph import LocalGraph

__all__ = ["check_flags", "fit", "eval_steps", "resumed_minibatch"]

log = logging.getLogger(__name__)


def check_flags(cfg: TrainConfig, task: Any) -> None:
    """Refuse what the epoch loop needs beyond the flags themselves (those are checked once, by `TrainConfig`):
    an optional package, a task's exact evaluation. Not collective: the flags are the same everywhere."""
    if cfg.tensorboard:  # up front, before any data is loaded: the optional package is installed
        require()
    check_combinations({"minibatch": cfg.minibatch, "task": task.name, "cooperative_task": task.cooperative})
    if cfg.eval == "exact" and type(task).evaluate_exact is Task.evaluate_exact:
        task.evaluate_exact(None, None, None)  # its ConfigError: the task has no exact evaluation


def _wants_resume(cfg: TrainConfig, comm: Any) -> bool:
    """Collective over `comm`: --resume, or --requeue with a checkpoint on any host of the job. Either way the
    newest generation is first copied to the hosts that lack it (node-local folders: `bring_generation`)."""
    if not (cfg.resume or cfg.requeue):
        return False
    with bounded("checkpoint survey"):
        found = bring_generation(comm, cfg.checkpoint_dir) is not None  # the same answer on every rank
    if cfg.requeue and not cfg.resume and not found and comm.rank == 0:
        log.info("--requeue: no checkpoint in %s on any host of this job: training starts at epoch 0",
                 cfg.checkpoint_dir)
    return bool(cfg.resume) or found


def resumed_minibatch(cfg: TrainConfig, comm: Any) -> str:
    """Collective over `comm`: the mini-batch mode the checkpoint a resume would load trained with ("" where
    there is no resume, or its checkpoint cannot say): `--minibatch auto` (or tune) continues it instead of choosing
    again, so a resumed run replays the uninterrupted one. An unreadable checkpoint is left to the resume
    itself, which names the problem."""
    if not _wants_resume(cfg, comm):
        return ""
    mode = ""
    if comm.rank == 0:
        try:
            mode = str((checkpoint_config(cfg.checkpoint_dir) or {}).get("minibatch", ""))
        except MpignnError:
            mode = ""
    with bounded("resume mode (bcast)"):
        return str(comm.bcast(mode if mode in MINIBATCH_MODES else "", root=0))


def fit(cfg: TrainConfig, rt: Runtime, graph: LocalGraph, loaders: dict[str, Any], model: torch.nn.Module,
        optimizer: torch.optim.Optimizer, stop: StopSignal | None = None,
        resolved: dict[str, Any] | None = None) -> int:
    """Collective over `rt.comm`: train `graph.task` for epochs `cfg.epochs`, resuming when asked; returns the
    exit code:
    0, or EXIT_STOPPED (75) when `stop` was requested on any rank (after the checkpoint, if any, is saved).

    On several ranks a `Watchdog` bounds every collective by `cfg.collective_timeout` seconds meanwhile: a
    rank that stops answering ends the job (MPI Abort) with a message naming it, instead of a hang.
    `resolved`: what the run's `auto` flags resolved to (`runtime.resolve`), stored in every epoch record and
    checkpoint.
    """
    if rt.world_size == 1 or watching() is not None:  # python -m mpignn.train watches from its start-up on
        return _fit(cfg, rt, graph, loaders, model, optimizer, stop, resolved or {})
    with Watchdog(rt.comm, cfg.collective_timeout):
        return _fit(cfg, rt, graph, loaders, model, optimizer, stop, resolved or {})


def _fit(cfg: TrainConfig, rt: Runtime, graph: LocalGraph, loaders: dict[str, Any], model: torch.nn.Module,
         optimizer: torch.optim.Optimizer, stop: StopSignal | None, resolved: dict[str, Any]) -> int:
    """`fit` without the watchdog: the checkpoint folder claimed (and locked) for the run's duration."""
    resuming = _wants_resume(cfg, rt.comm)
    lock = claim_checkpoint_dir(rt.comm, cfg, resuming) if cfg.checkpoint_dir else None
    try:
        return _train(cfg, rt, graph, loaders, model, optimizer, stop, resuming, resolved, lock is not None)
    finally:
        if lock is not None:
            lock.release()


def _train(cfg: TrainConfig, rt: Runtime, graph: LocalGraph, loaders: dict[str, Any], model: torch.nn.Module,
           optimizer: torch.optim.Optimizer, stop: StopSignal | None, resuming: bool, resolved: dict[str, Any],
           host_writer: bool = False) -> int:
    """The epochs. The reported test accuracy is the one at the best validation epoch (the OGB protocol); each
    epoch record carries best_epoch, best_val_acc and test_acc_at_best_val so far. `host_writer`: this rank
    keeps best/ for its host's --checkpoint-dir (rank 0, and each host's first rank where it is node-local)."""
    task = graph.task
    comm, best = rt.comm, BestEpoch(metric=task.metric)
    first_epoch, first_step, carry, stale = 0, 0, None, 0  # stale: evaluations since validation improved
    ref = None  # the validation score of the last improvement by min_delta (the converge rule's)
    check_outputs(comm, cfg, generation_bytes(model, getattr(graph, "embedding", None)))
    if resuming:
        info = resume_state(comm, cfg.checkpoint_dir, model, optimizer, cfg.to_dict(), rt.device,
                            rows=getattr(graph, "embedding", None), model_flags=task.model_flags)
        first_epoch, first_step = info["epoch"], info["step"]
        best = BestEpoch.from_dict(info["extra"].get("best", {}), best.metric)
        stale, ref = int(info["extra"].get("stale", 0)), info["extra"].get("ref")
        carry = info["extra"].get("partial") if first_step else None
        log.info("resumed from %s (%s) at epoch %d step %d (%s)", cfg.checkpoint_dir, info["generation"],
                 first_epoch, first_step,
                 "RNG states restored" if info["same_world"] else "another world size: fresh RNG states, the "
                 "data order differs from an uninterrupted run")
        if info["replay_changes"] and rt.rank == 0:
            log.warning("resuming with %s: the run continues but does not replay the original one exactly",
                        ", ".join(info["replay_changes"]))
    bf16 = cfg.precision == "bf16"
    if bf16 and rt.rank == 0 and cpu_lacks_bf16_units(rt.device):
        log.warning("--precision bf16 on a CPU without bf16 units (AVX512-BF16 or AMX): autocast emulates its "
                    "matrix products, many times slower than fp32. HINT: --precision fp32 (docs/failures.md)")
    model, optimizer = optimize_for_device(model, optimizer, rt.device, bf16)
    steps = len(loaders["train"])
    schedule = attach_lr_schedule(optimizer, cfg.lr, cfg.lr_scaling, batch_size=cfg.batch_size,
                                  batch_scope=cfg.batch_scope, world_size=rt.world_size, steps_per_epoch=steps,
                                  warmup_epochs=cfg.warmup_epochs, first_epoch=first_epoch)
    if schedule is not None and first_step:  # resumed mid-epoch: the warm-up continues at that step
        schedule.step += first_step
        for group in optimizer.param_groups:
            group["lr"] = schedule.lr_at(schedule.step)
    ddp, timer = wrap_ddp(model, comm, rt.device)
    plan = converge.schedule(cfg, steps)
    log.info("%d train steps per epoch, %s; training %s", steps, "bf16 autocast" if bf16 else "fp32",
             plan.describe(steps))
    rec: dict[str, Any] | None = None
    tb = ScalarLog(cfg.tensorboard) if cfg.tensorboard and rt.rank == 0 else None
    ends = eval_steps(steps, plan.evals_per_epoch)
    reached = patience_out = False
    for epoch in range(first_epoch, plan.epochs):
        resumed_here = epoch == first_epoch
        start = first_step if resumed_here else 0
        for end in [e for e in ends if e > start] or ends[-1:]:
            last = end == ends[-1]
            final = last and epoch == plan.epochs - 1  # the run's last evaluation always scores the test split
            due = not last or epoch == plan.epochs - 1 or (epoch + 1) % plan.eval_every == 0
            rec = run_epoch(rt, epoch, ddp, optimizer, loaders, task=task, bf16=bf16, timer=timer, graph=graph,
                            evaluate_now=due and cfg.eval != "exact", stop=stop, start_step=start,
                            end_step=None if last else end,
                            carry=carry if resumed_here and start == first_step else None,
                            test_if=cfg.target_val if cfg.target_val and not final else None)
            rec["resolved"] = resolved
            if "stopped_step" in rec:
                return _stopped(cfg, rt, graph, stop, rec, model, optimizer, best)
            if due and cfg.eval == "exact":  # collective: the scores of exact inference, in place of sampled ones
                evaluated = time.perf_counter()
                rec.update(task.evaluate_exact(rt, graph, ddp))
                rec["eval_s"] += float(allreduce_max(comm, [time.perf_counter() - evaluated])[0])  # the slowest
            if not last:
                rec["step"] = end
            improved = best.update(rec)
            val = rec.get(f"val_{best.metric}")
            if val is not None:
                moved = improved if not plan.min_delta else ref is None or val >= ref + plan.min_delta
                stale, ref = (0, val) if moved else (stale + 1, ref)
            rec.update(best.fields())

            def write(rec: dict[str, Any] = rec, step: int = eval_index(epoch, ends, end)) -> None:
                log.info(format_epoch(rec, task.describe(rec), task.unit))
                if tb is not None:
                    tb.write(rec, step=step)

            report_epoch(comm, cfg, rec, write)
            start = end
            test = rec.get(f"test_{best.metric}")
            reached = (bool(cfg.target_val) and val is not None and val >= cfg.target_val) or \
                (bool(cfg.target_test) and test is not None and test >= cfg.target_test)
            patience_out = bool(plan.patience) and stale >= plan.patience  # same on every rank: val is reduced
            if reached or patience_out:
                break
        if cfg.checkpoint_dir:  # after the epoch, or where the target was reached inside it
            done = start == ends[-1]
            gen = _save(cfg, rt, graph, epoch=epoch + 1 if done else epoch, step=0 if done else start,
                        model=model, optimizer=optimizer,
                        extra={"config": cfg.to_dict(), "resolved": resolved, "best": best.to_dict(), "stale": stale,
                               "ref": ref})
            if improved:  # the weights just saved are the best validation's
                on_behalf(comm, lambda: keep_best(gen, cfg.checkpoint_dir), f"a copy of {gen.name} to best/ in "
                          f"{cfg.checkpoint_dir}", f"free space there; {gen.name} holds the same weights",
                          writer=host_writer)
        if reached:
            hit_val = bool(cfg.target_val) and val is not None and val >= cfg.target_val
            split, score, flag, target = (("validation", val, "--target-val", cfg.target_val) if hit_val
                                          else ("test", test, "--target-test", cfg.target_test))
            log.info("%s %s %.4f reached %s %.4f after %.2f epochs: stopping", split, best.metric, score, flag,
                     target, rec["epochs_done"])
            break
        if patience_out:
            by = f" by {plan.min_delta:g}" if plan.min_delta else ""
            log.info("validation %s has not improved%s for %s%d evaluations (best %.4f at epoch %d): stopping after "
                     "epoch %d", best.metric, by, "--patience " if cfg.patience else "", plan.patience,
                     best.val_acc, best.epoch, epoch)
            break
    else:
        if plan.budget and rec is not None:
            log.info("the step budget of %d steps is spent after epoch %d (best validation %s at epoch %s): "
                     "stopping; --epochs N trains N epochs", plan.budget, plan.epochs - 1, best.metric, best.epoch)
    if rt.rank == 0 and rec is not None:
        print(format_final(best, rec, rt.world_size, task.metric_name, exact_eval=cfg.eval == "exact"),
              flush=True)
    return 0


def _save(cfg: TrainConfig, rt: Runtime, graph: LocalGraph, *, epoch: int, step: int, model: torch.nn.Module,
          optimizer: torch.optim.Optimizer, extra: dict[str, Any]) -> Path:
    """Collective over `rt.comm`: one checkpoint generation (each rank's learnable rows, tagged with the epoch
    and step, and the model, optimizer and RNG states), keeping the newest --keep-checkpoints."""
    with bounded("checkpoint save (rank 0 writes, the others wait)"):
        return save_state(rt.comm, cfg.checkpoint_dir, epoch=epoch, step=step, model=model, optimizer=optimizer,
                   device=rt.device, extra=extra, rows=getattr(graph, "embedding", None),
                   keep=cfg.keep_checkpoints)


def eval_steps(steps: int, evals_per_epoch: int) -> list[int]:
    """The steps after which an epoch of `steps` steps is evaluated `evals_per_epoch` times, evenly (the
    last is always the epoch's end; never more evaluations than steps)."""
    k = max(1, min(evals_per_epoch, steps))
    return sorted({-(-i * steps // k) for i in range(1, k + 1)}) if steps else [0]


def _stopped(cfg: TrainConfig, rt: Runtime, graph: LocalGraph, stop: Any, rec: dict[str, Any], model: torch.nn.Module,
             optimizer: torch.optim.Optimizer, best: BestEpoch) -> int:
    """Collective over `rt.comm`: save where the run stopped, say so on rank 0, requeue if asked."""
    epoch, step = rec["epoch"], rec["stopped_step"]
    log.info("stopping at epoch %d step %d", epoch, step)  # on every rank with MPIGNN_LOG_RANKS=all
    received = int(allreduce_max(rt.comm, [getattr(stop, "received", 0)])[0])  # the rank that saw it may not be 0
    name = signal.Signals(received).name if received else stop.name
    if cfg.checkpoint_dir:
        _save(cfg, rt, graph, epoch=epoch, step=step, model=model, optimizer=optimizer,
              extra={"config": cfg.to_dict(), "resolved": rec["resolved"], "best": best.to_dict(),
                     "partial": rec["partial"]})
        where = f"checkpoint in {cfg.checkpoint_dir}; resume with --resume"
    else:
        where = "nothing saved (no --checkpoint-dir)"
    if rt.rank == 0:
        print(f"stopped by {name} at epoch {epoch} step {step}; {where}", flush=True)
        if cfg.requeue:
            print(requeue(), flush=True)
    return EXIT_STOPPED
