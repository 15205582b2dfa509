"""Metrics over all ranks, weighted by items: `accuracy` and `mean`, one collective call each. They sum
numerators and counts and divide once: averaging averages weighs a rank with 10 seeds like one with 1,000.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mpignn.errors import ConfigError
from mpignn.launch.bootstrap import Runtime
from mpignn.mpi import allreduce_sum

__all__ = ["accuracy", "mean"]


def accuracy(rt: Runtime, pred: Any, target: Any) -> float:
    """Collective over `rt.comm`: return the share of items on all ranks where `pred` equals `target` (NaN: none)."""
    pred, target = _array(pred), _array(target)
    if pred.shape != target.shape:
        raise ConfigError(f"accuracy takes predictions and labels of one shape; got {pred.shape} and {target.shape}. "
                          "HINT: accuracy(rt, logits.argmax(-1), y)")
    return mean(rt, float((pred == target).sum()), pred.size)


def mean(rt: Runtime, total: Any, count: Any) -> float:
    """Collective over `rt.comm`: return the sum of `total` over ranks / the sum of `count` (NaN: none)."""
    total, count = float(_array(total).sum()), float(_array(count).sum())
    if count < 0:
        raise ConfigError(f"mean takes a count of items, not {count}. HINT: mean(rt, loss_sum, n)")
    summed, counted = allreduce_sum(rt.comm, [total, count]).tolist()
    return summed / counted if counted else float("nan")


def _array(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)
