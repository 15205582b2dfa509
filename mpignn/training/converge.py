"""Without `--epochs`: how many epochs at most, how often to evaluate and when to stop. Stdlib only.
The numbers' runs: docs/training.md ("Converging by default").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig

__all__ = ["Schedule", "schedule", "STEP_BUDGET", "EVAL_STEPS", "MIN_EVAL_STEPS", "PATIENCE_EVALS",
           "PATIENCE_STEPS", "MIN_DELTA"]

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
