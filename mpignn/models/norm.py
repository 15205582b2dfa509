"""The normalisation and residual connections of `SampledGNN` (`--norm`, `--residual`). `batch` all-reduces
its statistics, so N ranks normalise as one process, and evaluates on running statistics, so exact layer-wise
inference reproduces it. Imports torch only.
"""
from __future__ import annotations

from typing import Any

import torch

from mpignn.config.choices import NORMS  # there: config reads it without torch

__all__ = ["NORMS", "RankBatchNorm", "all_reduce_sum", "make_norm", "make_residual"]


def all_reduce_sum(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Collective over `group` (default: torch.distributed's) with several ranks: every rank must call it, in
    the same order. The differentiable sum of `x` over the ranks; `x` itself on one rank."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return x
    from torch.distributed.nn.functional import all_reduce  # its gradient is the sum of every rank's gradient

    return all_reduce(x, group=torch.distributed.group.WORLD if group is None else group)


class RankBatchNorm(torch.nn.Module):
    """BatchNorm1d over the rows of all ranks, from float64 sums all-reduced differentiably; running
    statistics as torch's. Training calls are collective over `group` (every rank, rows or none, as DDP's
    forward); evaluation uses the running statistics alone, no collective.
    """

    def __init__(self, width: int, eps: float = 1e-5, momentum: float = 0.1, group: Any = None) -> None:
        super().__init__()
        self.width, self.eps, self.momentum, self.group = width, eps, momentum, group
        self.weight = torch.nn.Parameter(torch.ones(width))
        self.bias = torch.nn.Parameter(torch.zeros(width))
        self.register_buffer("running_mean", torch.zeros(width))
        self.register_buffer("running_var", torch.ones(width))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def extra_repr(self) -> str:
        return f"{self.width}, eps={self.eps}, momentum={self.momentum}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        if self.training:
            mean, var = self._batch_stats(xf)
        else:
            mean, var = self.running_mean, self.running_var
        scale = torch.rsqrt(var + self.eps) * self.weight
        return ((xf - mean) * scale + self.bias).to(x.dtype)

    def _batch_stats(self, xf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, biased variance) over every rank's rows; updates the running statistics without a host read."""
        local = torch.cat([xf.sum(0, dtype=torch.float64), (xf * xf).sum(0, dtype=torch.float64),
                           torch.full((1,), float(len(xf)), dtype=torch.float64, device=xf.device)])
        total = all_reduce_sum(local, self.group)
        count = total[-1].detach()
        n = count.clamp(min=1)
        mean = total[:self.width] / n
        var = (total[self.width:2 * self.width] / n - mean * mean).clamp(min=0)
        with torch.no_grad():
            rows = count > 0
            unbiased = var * torch.where(count > 1, count / (count - 1).clamp(min=1), 1.0)
            for buffer, value in ((self.running_mean, mean), (self.running_var, unbiased)):
                step = torch.lerp(buffer, value.to(buffer.dtype), self.momentum)
                buffer.copy_(torch.where(rows, step, buffer))
            self.num_batches_tracked += rows.long()
        return mean.float(), var.float()


def make_norm(kind: str, width: int) -> torch.nn.Module | None:
    """The norm `--norm kind` puts after a hidden layer (None, LayerNorm or RankBatchNorm)."""
    makers = {"none": lambda _: None, "layer": torch.nn.LayerNorm, "batch": RankBatchNorm}
    if kind not in makers:
        raise ValueError(f"unknown norm {kind}; expected one of {', '.join(NORMS)}")
    return makers[kind](width)


def make_residual(c_in: int, c_out: int) -> torch.nn.Module:
    """A layer's residual branch: identity where widths agree, else a bias-free projection (the conv has one)."""
    return torch.nn.Identity() if c_in == c_out else torch.nn.Linear(c_in, c_out, bias=False)
