"""Checkpoints committed as one generation, read back without pickles; a generation counts once its
manifest, written last, is in it (docs/failures.md):

    DIR/gen-000007/embedding-rank{R}.npz   each rank's learnable rows (--embed-dim), written by that rank
    DIR/gen-000007/checkpoint.pt           model, optimizer, stacked RNG states, extra (each host's rank 0)
    DIR/gen-000007/manifest.json           generation, epoch, step, world size, sha256 of every file above
    DIR/best/checkpoint.pt                 a copy of the best validation's (`keep_best`)
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from mpignn.errors import ConfigError, mark_agreed
from mpignn.fileio import fsync_path, sha256_file, write_durable
from mpignn.mpi import allreduce_max, topology
from mpignn.mpi.collectives import checked
from mpignn.mpi.commit import commit_folder, manifest_bytes
from mpignn.training.checkpoint_hosts import CHECKPOINT, MANIFEST, corrupt_manifest, read_manifest, rows_name

__all__ = ["load_checkpoint", "read_checkpoint", "save_state", "resume_state", "check_compatible", "rng_state",
           "set_rng_state", "generations", "latest_checkpoint", "CHECKPOINT", "MANIFEST", "MODEL_KEYS",
           "REPLAY_KEYS", "checkpoint_config"]

FORMAT = 2
MODEL_KEYS = ("dataset", "task", "model", "hidden", "fanout", "embed_dim", "norm", "residual", "linear_head")
"""Flags the saved weights' shapes depend on (--fanout's length is the layers; --dataset the input width, classes
and types): a resume that changes one is refused."""
REPLAY_KEYS = ("seed", "batch_size", "batch_scope", "lr", "lr_scaling", "warmup_epochs", "weight_decay",
               "dropout", "precision", "replicated", "partition_method", "embed_lr", "minibatch")
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
    """Restore what `rng_state` returned."""
    # torch.set_rng_state ignores a row view's storage offset (it crashed, torch 2.13): clone first.
    torch.set_rng_state(state["cpu"].to(torch.uint8).clone())
    module = _device_rng(device)
    if module is not None and "device" in state:
        module.set_rng_state(state["device"].to(torch.uint8).clone(), torch.device(device))


def read_checkpoint(folder: Path, sha256: str | None = None, *, doing: str = "resume from",
                    hint: str = "the file is corrupt; delete its folder to resume from the generation before it",
                    ) -> dict[str, Any]:
    """Return the state saved in `folder/checkpoint.pt`, checked against `sha256` when given. Not collective.

    No checkpoint.pt is a ConfigError naming --resume; an unusable one (unpickling refusal, truncation, another
    checksum) is "cannot {doing} PATH: ... HINT: {hint}", `doing` and `hint` being the caller's wish and its fix.
    """
    path = folder / CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"--resume expected {CHECKPOINT} in {folder}; found none. HINT: check --checkpoint-dir, "
                          "or drop --resume to start fresh")
    try:
        data = path.read_bytes()
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
            raise ValueError(f"its sha256 is not the one in {MANIFEST}")
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # unpickling refusals, truncation and checksums all mean "unusable"
        raise ConfigError(f"cannot {doing} {path}: {type(exc).__name__}: {str(exc)[:200]}. HINT: {hint}") from None


def _apply(path: Path, state: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
           config: dict[str, Any] | None, model_flags: Sequence[str] = ()) -> dict[str, Any]:
    if state.get("format") != FORMAT:  # the first format stored the finished epoch, and no step
        raise ConfigError(f"cannot resume from {path}: it is of checkpoint format {state.get('format', 1)}; this "
                          f"mpignn reads format {FORMAT}. HINT: another --checkpoint-dir to start fresh, or resume "
                          "with the mpignn release that wrote it")
    try:  # a saved config that is not a dict, like a shape mismatch, is a file of another model
        changes = [] if config is None else check_compatible(state.get("extra", {}).get("config", {}), config,
                                                              model_flags)
        getattr(model, "module", model).load_state_dict(state["model"])
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
    except ConfigError:
        raise
    except Exception as exc:  # shape mismatches: another model
        raise ConfigError(f"cannot resume from {path}: {type(exc).__name__}: {str(exc)[:200]}. HINT: the file "
                          "is from another model/flags; use the original flags or another --checkpoint-dir") from None
    return {"epoch": int(state["epoch"]), "step": int(state["step"]), "rng": state.get("rng", {}),
            "extra": state.get("extra", {}), "replay_changes": changes}


def load_checkpoint(folder: str | os.PathLike, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer | None = None,
                    config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Restore model (and optimizer) from `folder/checkpoint.pt`, checking `config` first; return {"epoch",
    "step" (where training continues), "rng", "extra", "replay_changes"}. Not collective. ConfigError: no
    checkpoint, a corrupt one, or one of another model or model flags."""
    folder = Path(folder)
    return _apply(folder / CHECKPOINT, read_checkpoint(folder), model, optimizer, config)


def _numbered(folder: Path) -> list[tuple[int, Path]]:
    if not folder.is_dir():
        return []
    return sorted((int(p.name[4:]), p) for p in folder.iterdir()
                  if p.name.startswith("gen-") and p.name[4:].isdigit() and p.is_dir())


def generations(folder: str | os.PathLike) -> list[Path]:
    """List the complete generations in `folder` (those with a manifest), oldest first. Not collective."""
    return [p for _, p in _numbered(Path(folder)) if (p / MANIFEST).is_file()]


def latest_checkpoint(folder: str | os.PathLike) -> Path | None:
    """Return the newest complete generation (what a resume loads), or None."""
    return next(reversed(generations(folder)), None)


def checkpoint_config(folder: str | os.PathLike) -> dict[str, Any] | None:
    """Return the flags `latest_checkpoint(folder)` was saved with, or None; a corrupt checkpoint is refused as a
    resume would. Not collective."""
    where = latest_checkpoint(folder)
    return None if where is None else dict(read_checkpoint(where).get("extra", {}).get("config", {}))


ADDED_OFF = {"norm": "none", "residual": False, "linear_head": False}
"""Model flags newer than some checkpoints, and the value that builds the model those checkpoints hold."""


def check_compatible(saved: dict[str, Any], config: dict[str, Any], model_flags: Sequence[str] = ()) -> list[str]:
    """Refuse a resume whose MODEL_KEYS or `model_flags` (`Task.model_flags`) differ from `saved` (ConfigError
    naming each); return the REPLAY_KEYS flags that differ (no exact replay), and --eval where exact and sampled
    scores swap. A flag an older checkpoint lacks is not compared, unless `ADDED_OFF` gives its old value.
    """
    saved = {**ADDED_OFF, **saved}

    def diff(keys: tuple[str, ...]) -> list[str]:
        return [f"--{k.replace('_', '-')} {config[k]} (checkpoint: {saved[k]})" for k in keys
                if k in saved and k in config and saved[k] != config[k]]

    changed = diff(MODEL_KEYS + tuple(model_flags))
    if changed:
        raise ConfigError(f"--resume expects the model flags of the checkpoint; got {', '.join(changed)}. HINT: "
                          "resume with the checkpoint's flags, or use another --checkpoint-dir to start fresh")
    scores = [] if "eval" not in saved or (saved["eval"] == "exact") == (config.get("eval") == "exact") else \
        [f"--eval {config.get('eval')} (checkpoint: {saved['eval']}; the best epoch so far was chosen by other scores)"]
    return diff(REPLAY_KEYS) + scores


def save_state(comm: Any, folder: str | os.PathLike, *, epoch: int, step: int, model: torch.nn.Module,
               optimizer: torch.optim.Optimizer, device: str, extra: dict[str, Any], rows: Any = None,
               keep: int = 2) -> Path:
    """Collective over `comm`: commit one generation in `folder` and return it once every rank's part is written.

    Each host's first rank writes the checkpoint (node-local folders get it too); generations before the
    newest `keep` go only after the new one counts. A write that failed on some rank is a ConfigError on every
    rank alike, and the new generation is removed.
    """
    topo = topology(comm)
    writer = topo.local_rank == 0
    folder = Path(folder)
    number = int(allreduce_max(comm, [max((n for n, _ in _numbered(folder)), default=0)])[0]) + 1
    gen = folder / f"gen-{number:06d}"
    data = b""

    def write_own() -> tuple[str | None, dict[str, np.ndarray]]:
        gen.mkdir(parents=True, exist_ok=True)
        mine = {k: v.numpy() for k, v in rng_state(device).items()}
        if rows is None:
            return None, mine
        rows.save(gen / rows_name(comm.rank), epoch=epoch, step=step)
        return sha256_file(gen / rows_name(comm.rank)), mine

    def prepare(reports: list[tuple[str | None, dict[str, np.ndarray]]]) -> tuple[dict[str, Any], bytes | None]:
        nonlocal data
        rng = {k: torch.from_numpy(np.stack([states[k] for _, states in reports])) for k in reports[0][1]}
        buf = io.BytesIO()
        torch.save({"format": FORMAT, "epoch": int(epoch), "step": int(step),
                    "model": getattr(model, "module", model).state_dict(), "optimizer": optimizer.state_dict(),
                    "rng": rng, "extra": {**extra, "world_size": comm.size}}, buf)
        data = buf.getvalue()
        files = {rows_name(r): sha for r, (sha, _) in enumerate(reports) if sha is not None}
        files[CHECKPOINT] = hashlib.sha256(data).hexdigest()
        manifest = {"format": FORMAT, "generation": number, "epoch": int(epoch), "step": int(step),
                    "world_size": comm.size, "files": files}
        # the other hosts' first ranks write the same bytes (their folder may be node-local)
        return manifest, data if topo.num_hosts > 1 else None

    def finish(payload: tuple[dict[str, Any], bytes | None]) -> None:
        manifest, shipped = payload
        checkpoint = data if comm.rank == 0 else shipped
        write_durable(gen / CHECKPOINT, lambda f: f.write(checkpoint))
        write_durable(gen / MANIFEST, lambda f: f.write(manifest_bytes(manifest)))  # last: the generation counts
        fsync_path(folder)

    problem = commit_folder(comm, write_own, prepare, finish, writer=writer,
                            cleanup=lambda: shutil.rmtree(gen, ignore_errors=True))
    if problem:
        kept = generations(folder)
        raise mark_agreed(ConfigError(
            f"--checkpoint-dir expected room for checkpoint {gen.name} in {folder}; got {problem}. HINT: free "
            "space there or use another --checkpoint-dir; " +
            (f"the previous checkpoint {kept[-1].name} is kept and resumes" if kept else "nothing older was saved")))
    if writer:
        _prune(folder, number, keep)
    return gen


def _prune(folder: Path, newest: int, keep: int) -> None:
    """Each manifest goes first, so a half-removed folder never counts as complete."""
    complete = [n for n, p in _numbered(folder) if (p / MANIFEST).is_file()]
    oldest_kept = complete[-keep] if len(complete) >= keep else 0
    for n, path in _numbered(folder):
        if n < newest and (n < oldest_kept or not (path / MANIFEST).is_file()):
            with contextlib.suppress(OSError):
                (path / MANIFEST).unlink(missing_ok=True)
                fsync_path(path)
            shutil.rmtree(path, ignore_errors=True)


def _load_rows(rows: Any, where: Path, manifest: dict[str, Any], rank: int, epoch: int, step: int) -> None:
    path = where / rows_name(rank)
    if not path.is_file():
        raise ConfigError(f"--resume expected {path} (the learnable rows of rank {rank}); found none: it was "
                          "saved without --embed-dim or on fewer ranks. HINT: resume with the --embed-dim and "
                          "number of ranks it was saved with")
    expected = manifest.get("files", {}).get(path.name)
    if expected is not None and sha256_file(path) != expected:
        raise ConfigError(f"--resume expected {path} to match the sha256 in {MANIFEST}; it differs (corrupt). "
                          f"HINT: delete {where} to resume from the checkpoint before it")
    try:
        tags = rows.load(path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    except Exception as exc:
        raise ConfigError(f"cannot resume from {path}: {type(exc).__name__}: {str(exc)[:200]}. HINT: the file "
                          f"is corrupt; delete {where} to resume from the checkpoint before it") from None
    if tags != {"epoch": epoch, "step": step}:
        raise ConfigError(f"{path} belongs to epoch {tags.get('epoch')} step {tags.get('step')}, the checkpoint "
                          f"to epoch {epoch} step {step}. HINT: the run stopped while saving; resume from an "
                          "older copy of the folder or start afresh")


def _describe_ranks(idents: list[tuple[str, int, int, str]]) -> str:
    seen: dict[tuple[str, int, int, str], list[int]] = {}  # one pass over the ranks, however many
    for rank, ident in enumerate(idents):
        seen.setdefault(ident, []).append(rank)
    parts = []
    for (name, epoch, step, digest), ranks in seen.items():
        who = ",".join(map(str, ranks[:8])) + (",..." if len(ranks) > 8 else "")
        parts.append(f"rank {who}: {name} (epoch {epoch} step {step}, sha256 {digest})")
    return "; ".join(parts)


def resume_state(comm: Any, folder: str | os.PathLike, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 config: dict[str, Any], device: str, rows: Any = None,
                 model_flags: Sequence[str] = ()) -> dict[str, Any]:
    """Collective over `comm`: restore the newest complete checkpoint in `folder`, the same one on every rank.

    Each rank reads its own view (node-local folders differ). RNG states are restored on the same world
    size; on another, fresh ones are seeded from (seed, epoch, step, rank): the data order differs anyway.
    Returns load_checkpoint's dict, plus "same_world" (RNG states restored) and "generation" (the folder name).
    ConfigError on every rank alike: no checkpoint, a corrupt one, other model flags, or ranks that found
    different checkpoints (a stale node-local folder).
    """
    base = Path(folder)  # below: a generation's own folder, or best/ (predict)
    where = latest_checkpoint(base) or (base if (base / MANIFEST).is_file() else None)
    with checked(comm, ConfigError):
        if where is None and (base / CHECKPOINT).is_file():
            raise ConfigError(f"--resume found only {base / CHECKPOINT}, a single-file checkpoint of the format "
                              "before generations, which this mpignn no longer reads. HINT: another "
                              "--checkpoint-dir to start fresh, or resume with the mpignn release that wrote it")
        if where is None:
            raise ConfigError(f"--resume expected a checkpoint in {folder} (gen-*/{MANIFEST}); found none on any "
                              "host of this job. HINT: check --checkpoint-dir (a node-local one: run where the "
                              "saving job ran), or drop --resume to start fresh")
        try:
            raw = (where / MANIFEST).read_bytes()
            manifest = read_manifest(raw)
            state = read_checkpoint(where, manifest["files"][CHECKPOINT])
            ident = (where.name, int(state["epoch"]), int(state.get("step", 0)), hashlib.sha256(raw).hexdigest()[:12])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(corrupt_manifest(where, exc)) from None
    idents = comm.allgather(ident)
    if len(set(idents)) > 1:
        raise mark_agreed(ConfigError(
            f"--resume expects every rank to load the same checkpoint; got {_describe_ranks(idents)}. HINT: the "
            "hosts' --checkpoint-dir hold different checkpoints (a node-local folder left behind?): copy the "
            "newest gen-* folder to every host's --checkpoint-dir, or use one shared folder"))
    assert where is not None
    with checked(comm, ConfigError):
        info = _apply(where / CHECKPOINT, state, model, optimizer, config, model_flags)
        if rows is not None:
            _load_rows(rows, where, manifest, comm.rank, info["epoch"], info["step"])
    rng = info["rng"]
    same_world = bool(rng) and int(rng["cpu"].shape[0]) == comm.size
    if same_world:
        set_rng_state({k: v[comm.rank] for k, v in rng.items()}, device)
    else:
        torch.manual_seed(hash((config.get("seed", 0), info["epoch"], info["step"], comm.rank)) % 2**63)
    return {**info, "same_world": same_world, "generation": idents[0][0]}
