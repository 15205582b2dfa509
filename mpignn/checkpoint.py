"""Checkpoints: model and optimizer state after each epoch, written atomically on rank 0, read back with
`torch.load(weights_only=True)` (no unpickling of arbitrary objects), on any world size."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from mpignn.errors import ConfigError
from mpignn.fileio import atomic_path

__all__ = ["save_checkpoint", "load_checkpoint", "CHECKPOINT"]

CHECKPOINT = "checkpoint.pt"


def save_checkpoint(folder: str | os.PathLike, epoch: int, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, extra: dict[str, Any] | None = None) -> Path:
    """Write `folder/checkpoint.pt` for the finished `epoch`; the previous one stays until the new one is
    complete (temp file, then rename)."""
    module = getattr(model, "module", model)
    path = Path(folder) / CHECKPOINT
    with atomic_path(path) as tmp:
        torch.save({"epoch": epoch, "model": module.state_dict(), "optimizer": optimizer.state_dict(),
                    "extra": extra or {}}, tmp)
    return path


def load_checkpoint(folder: str | os.PathLike, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any]:
    """Restore model (and optimizer) state; returns {"epoch": last finished epoch, "extra": ...}.

    Raises:
        ConfigError: no checkpoint in `folder`, or one that is corrupt or made for another model.
    """
    path = Path(folder) / CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"--resume found no {CHECKPOINT} in {folder}. HINT: check --checkpoint-dir, or drop "
                          "--resume to start fresh")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        getattr(model, "module", model).load_state_dict(state["model"])
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
    except Exception as exc:  # unpickling refusals, truncation and shape mismatches all mean "unusable"
        raise ConfigError(f"cannot resume from {path}: {type(exc).__name__}: {str(exc)[:200]}. HINT: the file "
                          "is corrupt or from another model/flags; delete it or use the original flags") from None
    return {"epoch": int(state["epoch"]), "extra": state.get("extra", {})}
