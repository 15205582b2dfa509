"""Rebuild a trained run from its checkpoint (config, graph, model with its weights) through the same calls as
`python -m mpignn.train`. Reads checkpoints with `torch.load(weights_only=True)` only.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch

from mpignn.training.checkpoint import CHECKPOINT, MANIFEST, latest_checkpoint, read_checkpoint, resume_state
from mpignn.training.checkpoint_hosts import bring_generation, read_manifest
from mpignn.training.optim import adam
from mpignn.config.train_config import TrainConfig
from mpignn.errors import ConfigError
from mpignn.mpi.collectives import checked
from mpignn.runtime import LocalGraph, Runtime
from mpignn.runtime.graph import build_graph_and_model
from mpignn.tasks import Task, make_task

__all__ = ["Restored", "find_checkpoint", "read_saved", "restore_run", "OVERRIDABLE"]

OVERRIDABLE = ("root", "partitions", "exchange")
"""Training flags a prediction may change: where the data and partition are, and how rows travel."""


@dataclass(frozen=True)
class Restored:
    """A trained run, rebuilt: its config, task, this rank's graph and the model with its weights (eval mode)."""

    cfg: TrainConfig
    task: Task
    graph: LocalGraph
    model: torch.nn.Module
    generation: str
    epoch: int


def find_checkpoint(checkpoint_dir: str, generation: str = "latest") -> Path:
    """The folder holding the checkpoint.pt to predict with: `latest`, `best` or a gen-NNNNNN name. Not collective.

    Raises:
        ConfigError: no such checkpoint.
    """
    base = Path(checkpoint_dir)
    where = latest_checkpoint(base) if generation == "latest" else base / generation
    if where is None or not (where / CHECKPOINT).is_file():
        found = sorted(p.name for p in base.glob("gen-*")) + (["best"] if (base / "best").is_dir() else [])
        raise ConfigError(f"--checkpoint-dir expected a checkpoint ({generation}) in {checkpoint_dir}; found "
                          f"{', '.join(found) or 'none'}. HINT: train with python -m mpignn.train --checkpoint-dir "
                          f"{checkpoint_dir} first, or pick --generation latest, best or a gen-* folder")
    return where


def read_saved(folder: Path) -> dict[str, Any]:
    """{"config", "world_size", "epoch"} of `folder`'s checkpoint, checked against its manifest. Not collective.

    Raises:
        ConfigError: a corrupt checkpoint or one without a config.
    """
    hint = "use another --generation, or a checkpoint written by python -m mpignn.train"
    try:  # a corrupt manifest, or a state without a config: as unusable as a corrupt file
        manifest = folder / MANIFEST
        expected = read_manifest(manifest.read_bytes())["files"][CHECKPOINT] if manifest.is_file() else None
        state = read_checkpoint(folder, expected, doing="predict with", hint=hint)
        return {"config": state["extra"]["config"], "world_size": state["extra"].get("world_size"),
                "epoch": int(state.get("epoch", 0))}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"cannot predict with {folder / CHECKPOINT}: {type(exc).__name__}: {str(exc)[:200]}. "
                          f"HINT: {hint}") from None


def _config(saved: dict[str, Any], overrides: dict[str, Any]) -> TrainConfig:
    """The training config, as the run had it, with `overrides` (OVERRIDABLE keys; empty values: unchanged)."""
    names = {f.name for f in fields(TrainConfig)}
    values = {k: v for k, v in saved.items() if k in names}
    values.update({k: v for k, v in overrides.items() if v not in ("", None)})
    # nothing of the training loop runs: no resume, no logs to reopen; every rank owns its part
    values.update(resume=False, requeue=False, tensorboard="", metrics_out="",
                  replicated=False if not values.get("embed_dim") else values.get("replicated", False))
    if values.get("eval") == "full":  # a checkpoint from before --eval full became --eval exact
        values["eval"] = "exact"
    return TrainConfig(**values)


def restore_run(rt: Runtime, checkpoint_dir: str, generation: str = "latest",
                overrides: dict[str, Any] | None = None) -> Restored:
    """Collective over `rt.comm`: find the checkpoint, rebuild its run on this job's ranks, load the weights.

    Raises:
        ConfigError / PartitionFormatError / DatasetError: on every rank alike: no or a corrupt checkpoint, a
            partition that does not match it, learnable rows saved by another number of ranks.
    """
    # node-local folders: the generation reaches the hosts that lack it; what none holds, find_checkpoint says
    bring_generation(rt.comm, checkpoint_dir, None if generation == "latest" else generation)
    with checked(rt.comm, ConfigError):
        folder = find_checkpoint(checkpoint_dir, generation)
        saved = read_saved(folder)
        cfg = _config(saved["config"], overrides or {})
        if cfg.embed_dim and saved["world_size"] not in (None, rt.world_size):
            raise ConfigError(f"the checkpoint's learnable rows (--embed-dim {cfg.embed_dim}) were saved by "
                              f"{saved['world_size']} ranks, one file per rank's part; got {rt.world_size} ranks. "
                              f"HINT: mpirun -np {saved['world_size']} python -m mpignn.predict ...")
        task = make_task(cfg)
    graph, model = build_graph_and_model(rt, replace(cfg, cache_size=0), task)  # layers fetch rows: no cache
    optimizer = adam(model.parameters(), lr=cfg.lr)  # resume_state restores one; it is not used
    rng = torch.get_rng_state()
    info = resume_state(rt.comm, folder, model, optimizer, cfg.to_dict(), rt.device, rows=graph.embedding,
                        model_flags=task.model_flags)
    torch.set_rng_state(rng)  # inference draws nothing, but the caller's stream stays its own
    return Restored(cfg=cfg, task=task, graph=graph, model=model.eval(), generation=folder.name,
                    epoch=int(info["epoch"]))
