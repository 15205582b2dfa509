"""Checkpoints: model, optimizer, every rank's RNG state, the position (epoch, step) and the config, written
atomically on rank 0 and read back with `torch.load(weights_only=True)` (tensors, numbers and strings only:
nothing arbitrary is unpickled), on any world size.

With the same world size a resumed run replays the uninterrupted one bit for bit: the sampling streams are
derived from (seed, epoch, rank, step), and the torch RNGs (CPU and the rank's device), which dropout uses,
are restored per rank. Numpy's and Python's global RNGs are not used by training.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mpignn.errors import ConfigError, MpignnError
from mpignn.fileio import atomic_path
from mpignn.mpi import check_all

__all__ = ["save_checkpoint", "load_checkpoint", "save_state", "resume_state", "check_compatible", "rng_state",
           "set_rng_state", "CHECKPOINT", "MODEL_KEYS", "REPLAY_KEYS"]

CHECKPOINT = "checkpoint.pt"
FORMAT = 2
MODEL_KEYS = ("dataset", "model", "hidden", "fanout", "embed_dim")
"""Flags the saved weights' shapes depend on: a resume that changes one is refused."""
REPLAY_KEYS = ("seed", "batch_size", "batch_scope", "lr", "lr_scaling", "warmup_epochs", "weight_decay",
               "dropout", "precision", "replicated", "partition_method", "embed_lr")
"""Flags a bit-for-bit replay needs unchanged: a resume that changes one is allowed, with a warning."""


def _device_rng(device: str) -> Any:
    kind = torch.device(device).type
    module = getattr(torch, kind, None) if kind != "cpu" else None
    return module if module is not None and hasattr(module, "get_rng_state") else None


def rng_state(device: str = "cpu") -> dict[str, torch.Tensor]:
    """This rank's torch RNG states as uint8 tensors: "cpu", and "device" when `device` has its own RNG."""
    state = {"cpu": torch.get_rng_state()}
    module = _device_rng(device)
    if module is not None:
        state["device"] = module.get_rng_state(torch.device(device)).cpu()
    return state


def set_rng_state(state: dict[str, torch.Tensor], device: str = "cpu") -> None:
    """Restore what `rng_state` returned (rows of a stacked tensor are fine: they are copied first)."""
    # A row view of the stacked states starts at a storage offset, which torch.set_rng_state ignores (it
    # crashed here, torch 2.13): clone gives the state its own storage.
    torch.set_rng_state(state["cpu"].to(torch.uint8).clone())
    module = _device_rng(device)
    if module is not None and "device" in state:
        module.set_rng_state(state["device"].to(torch.uint8).clone(), torch.device(device))


def save_checkpoint(folder: str | os.PathLike, epoch: int, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, extra: dict[str, Any] | None = None, *, step: int = 0,
                    rng: dict[str, torch.Tensor] | None = None) -> Path:
    """Write `folder/checkpoint.pt`: training continues at (`epoch`, `step`); the previous file stays until
    the new one is complete (temp file, then rename). Not collective (see `save_state`).

    Args:
        rng: per-rank RNG states stacked along dim 0 ({"cpu": [world_size, n], "device": ...}).
        extra: numbers, strings, lists and dicts only (the config, the best epoch, partial sums).
    """
    module = getattr(model, "module", model)
    path = Path(folder) / CHECKPOINT
    with atomic_path(path) as tmp:
        torch.save({"format": FORMAT, "epoch": int(epoch), "step": int(step), "model": module.state_dict(),
                    "optimizer": optimizer.state_dict(), "rng": rng or {}, "extra": extra or {}}, tmp)
    return path


def load_checkpoint(folder: str | os.PathLike, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None = None,
                    config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Restore model (and optimizer) state; returns {"epoch", "step" (where training continues), "rng",
    "extra", "replay_changes"}. Files of the first format (no "format" key) stored the finished epoch: they
    continue after it. With `config`, the flags are checked first (`check_compatible`).

    Raises:
        ConfigError: no checkpoint in `folder`, one made with other model flags, or one that is corrupt or
            made for another model.
    """
    path = Path(folder) / CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"--resume expected {CHECKPOINT} in {folder}; found none. HINT: check --checkpoint-dir, "
                          "or drop --resume to start fresh")
    changes: list[str] = []
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if config is not None:
            changes = check_compatible(state.get("extra", {}).get("config", {}), config)
        getattr(model, "module", model).load_state_dict(state["model"])
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
    except ConfigError:
        raise
    except Exception as exc:  # unpickling refusals, truncation and shape mismatches all mean "unusable"
        raise ConfigError(f"cannot resume from {path}: {type(exc).__name__}: {str(exc)[:200]}. HINT: the file "
                          "is corrupt or from another model/flags; delete it or use the original flags") from None
    if "format" not in state:
        return {"epoch": int(state["epoch"]) + 1, "step": 0, "rng": {}, "extra": state.get("extra", {}),
                "replay_changes": changes}
    return {"epoch": int(state["epoch"]), "step": int(state["step"]), "rng": state.get("rng", {}),
            "extra": state.get("extra", {}), "replay_changes": changes}


def check_compatible(saved: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """Raise ConfigError when a MODEL_KEYS flag differs from the checkpoint's config; return the REPLAY_KEYS
    flags that differ (the run continues, but does not replay the uninterrupted one exactly)."""
    def diff(keys: tuple[str, ...]) -> list[str]:
        return [f"--{k.replace('_', '-')} {config[k]} (checkpoint: {saved[k]})" for k in keys
                if k in saved and k in config and saved[k] != config[k]]

    changed = diff(MODEL_KEYS)
    if changed:
        raise ConfigError(f"--resume expects the model flags of the checkpoint; got {', '.join(changed)}. HINT: "
                          "resume with the checkpoint's flags, or use another --checkpoint-dir to start fresh")
    return diff(REPLAY_KEYS)


def save_state(comm: Any, folder: str | os.PathLike, *, epoch: int, step: int, model: torch.nn.Module,
               optimizer: torch.optim.Optimizer, device: str, extra: dict[str, Any]) -> None:
    """Collective over `comm`: gather every rank's RNG states on rank 0, which writes the checkpoint; returns
    once the file is in place on every rank (so no rank exits before it is written)."""
    mine = {k: v.numpy() for k, v in rng_state(device).items()}
    states = comm.gather(mine, root=0)
    if comm.rank == 0:
        Path(folder).mkdir(parents=True, exist_ok=True)
        rng = {k: torch.from_numpy(np.stack([s[k] for s in states])) for k in mine}
        save_checkpoint(folder, epoch, model, optimizer, {**extra, "world_size": comm.size}, step=step, rng=rng)
    comm.Barrier()


def resume_state(comm: Any, folder: str | os.PathLike, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 config: dict[str, Any], device: str) -> dict[str, Any]:
    """Collective over `comm`: every rank loads the checkpoint, checks it against `config` (refusing another
    model shape with the same ConfigError on every rank), and restores its RNG states: its own with the
    same world size; on another world size, fresh states seeded from (seed, epoch, step, rank), since the
    data order differs anyway.

    Returns:
        load_checkpoint's dict (with "replay_changes": flags that differ, see check_compatible), plus
        "same_world" (whether the RNG states were restored).
    """
    problem, info = "", None
    try:
        info = load_checkpoint(folder, model, optimizer, config)
    except MpignnError as exc:
        problem = str(exc)
    check_all(comm, not problem, problem, ConfigError)
    assert info is not None
    rng = info["rng"]
    same_world = bool(rng) and int(rng["cpu"].shape[0]) == comm.size
    if same_world:
        set_rng_state({k: v[comm.rank] for k, v in rng.items()}, device)
    else:
        torch.manual_seed(hash((config.get("seed", 0), info["epoch"], info["step"], comm.rank)) % 2**63)
    return {**info, "same_world": same_world}
