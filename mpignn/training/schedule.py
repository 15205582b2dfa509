"""Learning-rate scaling, with a linear warm-up, for a global batch that grows with the ranks (Goyal et al., 2017:
linear; Krizhevsky, 2014: square root, for adaptive optimizers). Imports torch only.
"""
from __future__ import annotations

import math

import torch

__all__ = ["lr_factor", "WarmupScaledLR", "attach_lr_schedule"]


def lr_factor(rule: str, global_batch: int, base_batch: int) -> float:
    """Return the learning-rate multiplier of `rule` (none, linear, sqrt) for a global batch against the base."""
    ratio = global_batch / base_batch
    return {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[rule]


class WarmupScaledLR:
    """Ramp every param group's lr linearly to base_lr x factor over `warmup_steps`.

    An optimizer step hook, so training loops need no change; `start_step` continues a resumed ramp.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, base_lr: float, factor: float, warmup_steps: int,
                 start_step: int = 0) -> None:
        self.optimizer, self.base_lr, self.factor = optimizer, base_lr, factor
        self.warmup_steps, self.step = max(0, int(warmup_steps)), int(start_step)
        self._apply()
        optimizer.register_step_post_hook(self._after_step)

    def lr_at(self, step: int) -> float:
        if step >= self.warmup_steps:
            return self.base_lr * self.factor
        return self.base_lr * (1.0 + (self.factor - 1.0) * step / self.warmup_steps)

    def _apply(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        self.step += 1
        self._apply()


def attach_lr_schedule(optimizer: torch.optim.Optimizer, lr: float, rule: str, *, batch_size: int,
                       batch_scope: str, world_size: int, steps_per_epoch: int, warmup_epochs: float,
                       first_epoch: int = 0) -> WarmupScaledLR | None:
    """Scale the learning rate by `rule` when the global batch outgrows `batch_size` (batch scope "rank" on
    several ranks); None when there is nothing to scale."""
    global_batch = batch_size * (world_size if batch_scope == "rank" else 1)
    factor = lr_factor(rule, global_batch, batch_size)
    if factor == 1.0:
        return None
    return WarmupScaledLR(optimizer, lr, factor, round(warmup_epochs * steps_per_epoch),
                          start_step=first_epoch * steps_per_epoch)
