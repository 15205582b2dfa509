"""The optimizer: Adam, fused where torch has a fused kernel for the parameters' device.

torch's default Adam walks the parameters tensor by tensor; its fused kernel does the whole update in one pass.
The update is a fixed cost of every step on every rank, so it does not shrink as ranks are added: on Coauthor
CS (a 6,805-wide first layer) the default update was a visible part of a full-graph step and of its scaling
(docs/training.md, "Full-graph training"). Where no fused kernel serves the device, the default update is used.
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
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=fused or None)
