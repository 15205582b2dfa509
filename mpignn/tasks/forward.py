"""What every task's forward pass shares: bf16 autocast, the batch's learnable rows, and metric sums that
cost no device->host transfer per step."""
from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

__all__ = ["autocast", "with_rows", "MetricSums", "empty_loss", "count_equal"]


def autocast(device: str, bf16: bool) -> contextlib.AbstractContextManager:
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def empty_loss(model: torch.nn.Module) -> torch.Tensor:
    """A zero loss touching every parameter: a rank with no seeds still joins DDP's all-reduce."""
    return sum(p.sum() * 0.0 for p in model.parameters())  # type: ignore[return-value]


def count_equal(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Count correct predictions, on the device (`MetricSums` reads it once per pass)."""
    return (pred == labels).sum()


def with_rows(batch: Any, embedding: Any, device: str, train: bool = True) -> None:
    """Collective when `embedding` is given (every rank, every batch, empty ones too): append the batch nodes'
    learnable rows to `batch.x` (a heterogeneous batch's featureless types: as their input)."""
    if embedding is None:
        return
    bare = getattr(batch, "featureless", None)
    if bare is None:
        rows = embedding.pull(batch.n_id.cpu().numpy(), device)
        batch.x = torch.cat([batch.x.float(), rows if train else rows.detach()], dim=1)
        return
    ids = [batch[t].n_id.cpu().numpy() for t in bare]
    rows = embedding.pull(np.concatenate(ids) if ids else np.empty(0, dtype=np.int64), device)
    for t, part in zip(bare, torch.split(rows if train else rows.detach(), [len(i) for i in ids])):
        batch[t].x = part


class MetricSums:
    """Per-step metric sums that cost no device->host transfer per step: on an accelerator tensors add up on
    the device until `flush`; on the CPU (reading costs nothing) they are added at once."""

    def __init__(self, sums: dict[str, float], device: str) -> None:
        self.sums, self.on_host = sums, torch.device(device).type == "cpu"
        self.pending: dict[str, torch.Tensor] = {}

    def add(self, key: str, value: float | torch.Tensor) -> None:
        if self.on_host or not isinstance(value, torch.Tensor):
            self.sums[key] += float(value)
            return
        prev = self.pending.get(key)
        self.pending[key] = value if prev is None else prev + value

    def flush(self) -> dict[str, float]:
        """Add the device sums into `sums` (one read per key) and return `sums`."""
        for key, value in self.pending.items():
            self.sums[key] += value.item()
        self.pending.clear()
        return self.sums
