"""Which accelerator the gpu-marked tests run on: one definition for every test module."""
from __future__ import annotations

import pytest
import torch


def device_type() -> str | None:
    """"cuda" or "xpu" when torch sees such a device, else None."""
    if torch.cuda.is_available():
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    return "xpu" if xpu is not None and xpu.is_available() else None


DEVICE = device_type()
needs_device = pytest.mark.skipif(DEVICE is None, reason="no CUDA or XPU device visible to torch")
