"""The training schedule: without `--epochs`, the epoch cap, evaluation interval and stopping rule
(docs/training.md, "Converging by default"); learning-rate scaling with a linear warm-up for a global batch that
grows with the ranks (Goyal et al., 2017: linear; Krizhevsky, 2014: square root, for adaptive
optimizers). Imports torch only."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.optim.lr_scheduler import LambdaLR

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig

__all__ = ["Schedule", "schedule", "STEP_BUDGET", "EVAL_STEPS", "MIN_EVAL_STEPS", "PATIENCE_EVALS",
           "PATIENCE_STEPS", "MIN_DELTA", "lr_factor", "attach_lr_schedule"]

STEP_BUDGET = 300
"""Optimizer steps a run without --epochs trains at most (whole epochs; at least one)."""
EVAL_STEPS = 200
"""Without --epochs, evaluate at least every this many steps (several times per epoch on huge graphs)."""
MIN_EVAL_STEPS = 5
"""... and at most every this many (every few epochs where an epoch is a step or two)."""
PATIENCE_EVALS = 3
"""Without --epochs: evaluations without improvement before stopping, at least."""
PATIENCE_STEPS = 50
"""... and at least this many steps' worth of them."""
MIN_DELTA = 0.002
"""Without --epochs, validation must beat its best by this much (0.2 point of accuracy) to count as improving."""


@dataclass(frozen=True)
class Schedule:
    """What `fit` runs; `patience` 0: never stop early; `budget` 0: --epochs was given."""

    epochs: int
    eval_every: int
    evals_per_epoch: int
    patience: int
    min_delta: float
    budget: int

    def describe(self, steps_per_epoch: int) -> str:
        if not self.budget:
            return f"{self.epochs} epochs"
        every = f"every {self.eval_every} epochs" if self.eval_every > 1 else f"{self.evals_per_epoch}x per epoch"
        return (f"until validation (evaluated {every}) stops improving by {self.min_delta:g} for {self.patience} "
                f"evaluations, at most {self.epochs} epochs ({self.epochs * steps_per_epoch} steps; --epochs N "
                "trains N)")


def schedule(cfg: TrainConfig, steps_per_epoch: int) -> Schedule:
    """Return the schedule of `cfg` with epochs of `steps_per_epoch` steps. Not collective: the count is agreed."""
    if cfg.epochs:
        return Schedule(cfg.epochs, cfg.eval_every, cfg.evals_per_epoch, cfg.patience, 0.0, 0)
    steps = max(1, steps_per_epoch)
    evals = cfg.evals_per_epoch if cfg.evals_per_epoch > 1 else max(1, -(-steps // EVAL_STEPS))
    every = cfg.eval_every if cfg.eval_every > 1 or evals > 1 else max(1, -(-MIN_EVAL_STEPS // steps))
    per_eval = every * steps / min(evals, steps)
    patience = cfg.patience or max(PATIENCE_EVALS, -(-PATIENCE_STEPS // int(per_eval)))
    epochs = max(1, STEP_BUDGET // steps)
    return Schedule(epochs, every, evals, patience, MIN_DELTA, epochs * steps)


def lr_factor(rule: str, global_batch: int, base_batch: int) -> float:
    """Return the learning-rate multiplier of `rule` (none, linear, sqrt) for a global batch against the base."""
    ratio = global_batch / base_batch
    return {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[rule]


def attach_lr_schedule(optimizer: torch.optim.Optimizer, lr: float, rule: str, *, batch_size: int,
                       batch_scope: str, world_size: int, steps_per_epoch: int, warmup_epochs: float,
                       start_step: int = 0) -> LambdaLR | None:
    """Scale the learning rate by `rule` when the global batch outgrows `batch_size` (batch scope "rank" on
    several ranks), ramping linearly from `lr` over the warm-up and continuing from `start_step` (a resumed run's);
    stepped by an optimizer hook, so training loops need no change. None when there is nothing to scale."""
    global_batch = batch_size * (world_size if batch_scope == "rank" else 1)
    factor = lr_factor(rule, global_batch, batch_size)
    if factor == 1.0:
        return None
    warmup = round(warmup_epochs * steps_per_epoch)
    for group in optimizer.param_groups:  # not the resumed optimizer's lr: that one is mid-ramp
        group["initial_lr"] = lr

    def at(step: int) -> float:
        step += start_step
        return factor if step >= warmup else 1.0 + (factor - 1.0) * step / warmup

    ramp = LambdaLR(optimizer, at)
    optimizer.register_step_post_hook(lambda *_: ramp.step())
    return ramp
