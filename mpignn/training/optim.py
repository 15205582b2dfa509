"""The optimizer: Adam, fused where the device has the kernel: the update is a fixed cost per step that does not
shrink with more ranks (docs/training.md, "Full-graph training").
"""
from __future__ import annotations

from typing import Iterable

import torch

__all__ = ["adam"]


def adam(params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam over `params` (one device), fused where the device has the kernel."""
    params = list(params)
    device = params[0].device.type if params else "cpu"
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        fused = device in _get_fused_kernels_supported_devices()
    except ImportError:  # a torch without the helper: the default update
        fused = False
    return Adam(params, lr=lr, weight_decay=weight_decay, fused=fused or None)


class Adam(torch.optim.Adam):
    """torch's Adam, stepping a column-major parameter as its contiguous transpose: the update is elementwise,
    and the fused kernel would copy a non-contiguous tensor in and out (docs/training.md)."""

    def step(self, closure=None):  # type: ignore[override]
        flipped = [p for group in self.param_groups for p in group["params"]  # the column-major ones
                   if p.dim() == 2 and not p.is_contiguous() and p.t().is_contiguous()]
        for p in flipped:
            self._transpose(p)
        try:
            return super().step(closure)
        finally:
            for p in flipped:
                self._transpose(p)

    def _transpose(self, p: torch.nn.Parameter) -> None:
        p.data = p.data.t()
        if p.grad is not None:
            p.grad = p.grad.t()
        state = self.state.get(p, {})
        for key, value in state.items():
            if torch.is_tensor(value) and value.dim() == 2:
                state[key] = value.t()
