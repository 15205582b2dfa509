"""The epoch loop of `python -m mpignn.train`: resume, train, evaluate, keep the best validation epoch, save
checkpoints, and stop in agreement on SIGUSR2. Built on epoch, checkpoint, record and stopping; imports torch.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import time
from typing import Any, TYPE_CHECKING

import torch

from mpignn.config.refusals import check_combinations
from mpignn.config.choices import MINIBATCH_MODES
from mpignn.errors import MpignnError
from mpignn.training.checkpoint import checkpoint_config, resume_state, save_state
from mpignn.training.checkpoint_hosts import bring_generation
from mpignn.launch.device import cpu_lacks_bf16_units
from mpignn.training.ddp import optimize_for_device, wrap_ddp
from mpignn.training.epoch import EpochParts, run_epoch
from mpignn.training.record import BestEpoch, format_epoch, format_final
from mpignn.training.run_files import (check_outputs, claim_checkpoint_dir, generation_bytes, keep_best, on_behalf,
                                       report_epoch)
from mpignn.training.schedule import attach_lr_schedule, schedule
from mpignn.training.stopping import EXIT_STOPPED, StopSignal, requeue
from mpignn.tasks import Task
from mpignn.training.tensorboard import ScalarLog, require
from mpignn.mpi import allreduce_max
from mpignn.mpi.watchdog import bounded

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig
    from mpignn.launch.bootstrap import Runtime
    from mpignn.loader.local_graph import LocalGraph

__all__ = ["Trainer", "check_flags", "fit", "eval_steps", "wants_resume", "resumed_minibatch"]

log = logging.getLogger(__name__)


def check_flags(cfg: TrainConfig, task: Any) -> None:
    """Refuse what the loop needs beyond valid flags (an optional package, exact evaluation). Not collective."""
    if cfg.tensorboard:  # up front, before any data is loaded: the optional package is installed
        require()
    check_combinations({"minibatch": cfg.minibatch, "task": task.name, "cooperative_task": task.cooperative})
    if cfg.eval == "exact" and type(task).evaluate_exact is Task.evaluate_exact:
        task.evaluate_exact(None, None, None)  # its ConfigError: the task has no exact evaluation


def wants_resume(cfg: TrainConfig, comm: Any) -> bool:
    """Collective over `comm`: --resume, or --requeue with a checkpoint on any host (copied to those that lack it)."""
    if not (cfg.resume or cfg.requeue):
        return False
    with bounded("checkpoint survey"):
        found = bring_generation(comm, cfg.checkpoint_dir) is not None  # the same answer on every rank
    if cfg.requeue and not cfg.resume and not found and comm.rank == 0:
        log.info("--requeue: no checkpoint in %s on any host of this job: training starts at epoch 0",
                 cfg.checkpoint_dir)
    return bool(cfg.resume) or found


def resumed_minibatch(cfg: TrainConfig, comm: Any) -> str:
    """Collective over `comm`, called where `wants_resume`: return the mode the resumed checkpoint trained with, else
    "", so `--minibatch auto`/`tune` continue it (a resume replays the run); an unreadable one is left to the resume."""
    mode = ""
    if comm.rank == 0:
        with contextlib.suppress(MpignnError):
            mode = str((checkpoint_config(cfg.checkpoint_dir) or {}).get("minibatch", ""))
    with bounded("resume mode (bcast)"):
        return str(comm.bcast(mode if mode in MINIBATCH_MODES else "", root=0))


def fit(cfg: TrainConfig, rt: Runtime, graph: LocalGraph, loaders: dict[str, Any], model: torch.nn.Module,
        optimizer: torch.optim.Optimizer, stop: StopSignal | None = None,
        resolved: dict[str, Any] | None = None, resuming: bool = False) -> int:
    """Collective over `rt.comm`: train `graph.task`, resuming if `resuming` (`wants_resume`), the checkpoint folder
    locked meanwhile. `resolved` (the `auto` flags' values) is kept in records and checkpoints. Returns 0, or
    EXIT_STOPPED when `stop` was requested on any rank (after the checkpoint is saved).
    """
    lock = claim_checkpoint_dir(rt.comm, cfg, resuming) if cfg.checkpoint_dir else None
    try:
        return Trainer(cfg, rt, graph, loaders, model, optimizer, stop, resolved or {},
                       lock is not None).run(resuming)
    finally:
        if lock is not None:
            lock.release()


class Trainer:
    """Run the epochs of one run as named steps (walked through in docs/architecture.md).

    The reported test score is the one at the best validation epoch (the OGB protocol). Every step that talks
    to other ranks is collective over `rt.comm`, in the same order on every rank."""

    def __init__(self, cfg: TrainConfig, rt: Runtime, graph: LocalGraph, loaders: dict[str, Any],
                 model: torch.nn.Module, optimizer: torch.optim.Optimizer, stop: StopSignal | None,
                 resolved: dict[str, Any], host_writer: bool = False) -> None:
        self.cfg, self.rt, self.graph, self.loaders, self.stop, self.resolved = cfg, rt, graph, loaders, stop, resolved
        self.task, self.host_writer = graph.task, host_writer  # host_writer: keeps best/ for its host's folder
        self.best = BestEpoch(metric=self.task.metric)
        self.first_epoch, self.first_step, self.carry = 0, 0, None
        self.stale, self.ref = 0, None  # evaluations since validation improved; the score it last improved by min_delta
        self.rec: dict[str, Any] | None = None
        self.improved, self.val, self.test = False, None, None
        self.model, self.optimizer = model, optimizer
        check_outputs(rt.comm, cfg, generation_bytes(model, graph.embedding))

    def resume(self) -> None:
        """Load the newest checkpoint: weights, optimizer, RNG states, position and the best epoch so far."""
        cfg, rt = self.cfg, self.rt
        info = resume_state(rt.comm, cfg.checkpoint_dir, self.model, self.optimizer, cfg.to_dict(), rt.device,
                            rows=self.graph.embedding, model_flags=self.task.model_flags)
        self.first_epoch, self.first_step = info["epoch"], info["step"]
        self.best = BestEpoch.from_dict(info["extra"].get("best", {}), self.best.metric)
        self.stale, self.ref = int(info["extra"].get("stale", 0)), info["extra"].get("ref")
        self.carry = info["extra"].get("partial") if self.first_step else None
        log.info("resumed from %s (%s) at epoch %d step %d (%s)", cfg.checkpoint_dir, info["generation"],
                 self.first_epoch, self.first_step,
                 "RNG states restored" if info["same_world"] else "another world size: fresh RNG states, the "
                 "data order differs from an uninterrupted run")
        if info["replay_changes"] and rt.rank == 0:
            log.warning("resuming with %s: the run continues but does not replay the original one exactly",
                        ", ".join(info["replay_changes"]))

    def prepare(self) -> None:
        """Set up the device's model and optimizer, the LR schedule, DDP, the evaluations and TensorBoard."""
        cfg, rt = self.cfg, self.rt
        self.bf16 = cfg.precision == "bf16"
        if self.bf16 and rt.rank == 0 and cpu_lacks_bf16_units(rt.device):
            log.warning("--precision bf16 on a CPU without bf16 units (AVX512-BF16 or AMX): autocast emulates its "
                        "matrix products, many times slower than fp32. HINT: --precision fp32 (docs/failures.md)")
        self.model, self.optimizer = optimize_for_device(self.model, self.optimizer, rt.device, self.bf16)
        steps = len(self.loaders["train"])
        # resumed mid-epoch: the warm-up continues at that step
        attach_lr_schedule(self.optimizer, cfg.lr, cfg.lr_scaling, batch_size=cfg.batch_size,
                           batch_scope=cfg.batch_scope, world_size=rt.world_size, steps_per_epoch=steps,
                           warmup_epochs=cfg.warmup_epochs, start_step=self.first_epoch * steps + self.first_step)
        self.ddp, timer = wrap_ddp(self.model, rt.comm, rt.device)
        self.parts = EpochParts(rt, self.ddp, self.optimizer, self.loaders, self.graph, self.bf16, timer, self.stop)
        self.plan = schedule(cfg, steps)
        log.info("%d train steps per epoch, %s; training %s", steps, "bf16 autocast" if self.bf16 else "fp32",
                 self.plan.describe(steps))
        self.tb = ScalarLog(cfg.tensorboard) if cfg.tensorboard and rt.rank == 0 else None
        self.ends = eval_steps(steps, self.plan.evals_per_epoch)

    def run(self, resuming: bool) -> int:
        """Train to the end, a target or patience; return the exit code (EXIT_STOPPED after a stop)."""
        if resuming:
            self.resume()
        self.prepare()
        reason = ""
        for epoch in range(self.first_epoch, self.plan.epochs):
            resumed_here = epoch == self.first_epoch
            start = self.first_step if resumed_here else 0
            for end in [e for e in self.ends if e > start] or self.ends[-1:]:
                rec = self.train(epoch, start, end, resumed_here and start == self.first_step)
                if "stopped_step" in rec:
                    return self.stopped(rec)
                self.evaluate(rec, epoch, end)
                self.track(rec)
                self.report(rec, epoch, end)
                start = end
                reason = self.stopping()
                if reason:
                    break
            if self.cfg.checkpoint_dir:  # after the epoch, or where the target was reached inside it
                self.checkpoint(epoch, start)
            if reason:
                log.info("%s", reason)
                break
        else:
            if self.plan.budget and self.rec is not None:
                log.info("the step budget of %d steps is spent after epoch %d (best validation %s at epoch %s): "
                         "stopping; --epochs N trains N epochs", self.plan.budget, self.plan.epochs - 1,
                         self.best.metric, self.best.epoch)
        if self.rt.rank == 0 and self.rec is not None:
            print(format_final(self.best, self.rec, self.rt.world_size, self.task.metric_name,
                               exact_eval=self.cfg.eval == "exact"), flush=True)
        return 0

    def _due(self, epoch: int, end: int) -> bool:
        """Whether the evaluation after step `end` of `epoch` scores (the epoch's end only every --eval-every)."""
        last, plan = end == self.ends[-1], self.plan
        return not last or epoch == plan.epochs - 1 or (epoch + 1) % plan.eval_every == 0

    def train(self, epoch: int, start: int, end: int, resumed: bool) -> dict[str, Any]:
        """Train steps [start, end) of `epoch`, sampled evaluation where due; return the epoch record."""
        cfg, last = self.cfg, end == self.ends[-1]
        final = last and epoch == self.plan.epochs - 1  # the run's last evaluation always scores the test split
        rec = run_epoch(self.parts, epoch, evaluate_now=self._due(epoch, end) and cfg.eval != "exact",
                        start_step=start, end_step=None if last else end,
                        carry=self.carry if resumed else None,
                        test_if=cfg.target_val if cfg.target_val and not final else None)
        rec["resolved"] = self.resolved
        self.rec = rec
        return rec

    def evaluate(self, rec: dict[str, Any], epoch: int, end: int) -> None:
        """Collective: with --eval exact, put exact inference's scores in place of the sampled ones."""
        if self._due(epoch, end) and self.cfg.eval == "exact":
            evaluated = time.perf_counter()
            rec.update(self.task.evaluate_exact(self.rt, self.graph, self.ddp))
            rec["eval_s"] += float(allreduce_max(self.rt.comm, [time.perf_counter() - evaluated])[0])  # the slowest
        if end != self.ends[-1]:
            rec["step"] = end

    def track(self, rec: dict[str, Any]) -> None:
        """Track the best validation epoch and the evaluations since it improved (same on every rank)."""
        self.improved = self.best.update(rec)
        self.val = rec.get(f"val_{self.best.metric}")
        self.test = rec.get(f"test_{self.best.metric}")
        if self.val is not None:
            delta = self.plan.min_delta
            moved = self.improved if not delta else self.ref is None or self.val >= self.ref + delta
            self.stale, self.ref = (0, self.val) if moved else (self.stale + 1, self.ref)
        rec.update(self.best.fields())

    def report(self, rec: dict[str, Any], epoch: int, end: int) -> None:
        """Collective: write the epoch line, metrics file and TensorBoard (rank 0 writes, the others agree)."""
        step = epoch * len(self.ends) + self.ends.index(end) + 1  # TensorBoard's: one per evaluation, stable on resume

        def write() -> None:
            log.info(format_epoch(rec, self.task.describe(rec), self.task.unit))
            if self.tb is not None:
                self.tb.write(rec, step=step)

        report_epoch(self.rt.comm, self.cfg, rec, write)

    def stopping(self) -> str:
        """Return why the run ends here (a target, patience), as the log says it, or "" to go on."""
        cfg, best, plan = self.cfg, self.best, self.plan
        for split, score, flag, target in (("validation", self.val, "--target-val", cfg.target_val),
                                           ("test", self.test, "--target-test", cfg.target_test)):
            if target and score is not None and score >= target:
                return (f"{split} {best.metric} {score:.4f} reached {flag} {target:.4f} after "
                        f"{self.rec['epochs_done']:.2f} epochs: stopping")
        if not (plan.patience and self.stale >= plan.patience):
            return ""
        by = f" by {plan.min_delta:g}" if plan.min_delta else ""
        return (f"validation {best.metric} has not improved{by} for {'--patience ' if cfg.patience else ''}"
                f"{plan.patience} evaluations (best {best.val_acc:.4f} at epoch {best.epoch}): stopping after "
                f"epoch {self.rec['epoch']}")

    def checkpoint(self, epoch: int, step: int, partial: Any = None) -> None:
        """Collective: save a generation after step `step` of `epoch` (stopped: with the epoch's `partial` record),
        copied to best/ when it is best. Stopped or not, it holds what `resume` needs to replay the run."""
        cfg, rt = self.cfg, self.rt
        done = partial is None and step == self.ends[-1]  # the next epoch's step 0
        extra = {"config": cfg.to_dict(), "resolved": self.resolved, "best": self.best.to_dict(),
                 "stale": self.stale, "ref": self.ref, **({"partial": partial} if partial is not None else {})}
        with bounded("checkpoint save (rank 0 writes, the others wait)"):
            gen = save_state(rt.comm, cfg.checkpoint_dir, epoch=epoch + 1 if done else epoch,
                             step=0 if done else step, model=self.model, optimizer=self.optimizer,
                             device=rt.device, extra=extra, rows=self.graph.embedding, keep=cfg.keep_checkpoints)
        if partial is None and self.improved:  # the weights just saved are the best validation's
            on_behalf(rt.comm, lambda: keep_best(gen, cfg.checkpoint_dir), f"a copy of {gen.name} to best/ in "
                      f"{cfg.checkpoint_dir}", f"free space there; {gen.name} holds the same weights",
                      writer=self.host_writer)

    def stopped(self, rec: dict[str, Any]) -> int:
        """Collective: save where a stop signal ended the epoch, say so on rank 0, requeue if asked."""
        cfg, rt, stop = self.cfg, self.rt, self.stop
        epoch, step = rec["epoch"], rec["stopped_step"]
        log.info("stopping at epoch %d step %d", epoch, step)  # on every rank with MPIGNN_LOG_RANKS=all
        received = int(allreduce_max(rt.comm, [getattr(stop, "received", 0)])[0])  # the rank that saw it may not be 0
        name = signal.Signals(received).name if received else stop.name
        if cfg.checkpoint_dir:
            self.checkpoint(epoch, step, partial=rec["partial"])
            where = f"checkpoint in {cfg.checkpoint_dir}; resume with --resume"
        else:
            where = "nothing saved (no --checkpoint-dir)"
        if rt.rank == 0:
            print(f"stopped by {name} at epoch {epoch} step {step}; {where}", flush=True)
            if cfg.requeue:
                print(requeue(), flush=True)
        return EXIT_STOPPED


def eval_steps(steps: int, evals_per_epoch: int) -> list[int]:
    """Return the steps after which to evaluate, evenly spaced; the last is the epoch's end."""
    k = max(1, min(evals_per_epoch, steps))
    return sorted({-(-i * steps // k) for i in range(1, k + 1)}) if steps else [0]
