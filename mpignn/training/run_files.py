"""The run's own files: its checkpoint folder (one run's, locked while it trains) and its outputs, checked
before training, so a failed write is one agreed line on every rank, never one rank's traceback while the
others wait. Imports the stdlib, torch (a model's size) and the layers below."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import torch

from mpignn.errors import ConfigError
from mpignn.fileio import atomic_dir, remove_leftovers
from mpignn.mpi import check_all, topology
from mpignn.mpi.commit import os_problem
from mpignn.mpi.transfer import sees_rank0
from mpignn.training.checkpoint import CHECKPOINT, MANIFEST, generations
from mpignn.training.checkpoint_hosts import read_manifest
from mpignn.training.record import append_jsonl

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig

__all__ = ["LOCK", "FolderLock", "claim_checkpoint_dir", "check_outputs", "generation_bytes", "on_behalf",
           "report_epoch", "keep_best"]

LOCK = ".mpignn-lock"
"""The lock file in --checkpoint-dir: an flock, so a dead job's leftover file holds nothing; it names the holder."""


class FolderLock:
    """An exclusive, non-blocking flock on FOLDER/.mpignn-lock, held until `release` or the process ends."""

    def __init__(self, folder: Path) -> None:
        self.path, self.fd = folder / LOCK, -1

    def acquire(self) -> str:
        """Return "" once held, else who holds it (pid and host)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return ""  # a filesystem without flock (some NFS set-ups): not locked, not refused
            try:
                holder = json.loads(self.path.read_text() or "{}")
            except (OSError, ValueError):
                holder = {}
            return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
        self.fd = fd
        return ""

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the flock
            self.fd = -1


def _saved(folder: Path) -> str:
    gens = generations(folder)
    if gens:
        try:
            manifest = read_manifest((gens[-1] / MANIFEST).read_bytes())
        except ValueError as exc:  # still another run's: refused as such, and --force-new removes it
            return f"{gens[-1].name} (its {MANIFEST} is corrupt: {type(exc).__name__})"
        return f"{gens[-1].name} (epoch {manifest.get('epoch')}, step {manifest.get('step')})"
    return CHECKPOINT if (folder / CHECKPOINT).is_file() else ""


def claim_checkpoint_dir(comm: Any, cfg: TrainConfig, resuming: bool) -> FolderLock | None:
    """Collective over `comm`: create and lock --checkpoint-dir on every host that writes it (node-local too);
    return this rank's lock (None where it holds none) to hold for the run. Another run's checkpoint (neither
    `resuming` nor --force-new) or another live job training there is an agreed ConfigError."""
    folder = Path(cfg.checkpoint_dir)
    lock, problem = None, ""
    if comm.rank == 0:
        lock, problem = _claim(folder, cfg, resuming)
    check_all(comm, not problem, problem, ConfigError)
    if comm.size > 1:
        leader, shared = topology(comm).local_rank == 0, sees_rank0(comm, folder)
        if leader and not shared:
            lock, problem = _claim(folder, cfg, resuming)
    try:
        check_all(comm, not problem, problem, ConfigError)
    except ConfigError:
        if lock is not None:
            lock.release()
        raise
    return lock


def _claim(folder: Path, cfg: TrainConfig, resuming: bool) -> tuple[FolderLock | None, str]:
    lock, problem, host = None, "", socket.gethostname()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(folder)
        holder = lock.acquire()
        saved = "" if resuming else _saved(folder)
        if holder:
            problem = (f"--checkpoint-dir expected a folder no other job trains in; got {folder} on {host}, locked "
                       f"by {holder} ({LOCK}). HINT: wait for that job, or use another --checkpoint-dir")
        elif saved and not cfg.force_new:
            problem = (f"--checkpoint-dir expected a folder of this run; got {folder} on {host} holding another "
                       f"run's checkpoint {saved}. HINT: add --resume to continue it, --force-new to start over "
                       "there (its checkpoints are removed), or use another --checkpoint-dir")
        elif saved:  # --force-new: the other run's checkpoints go
            for path in [*folder.glob("gen-*"), folder / "best"]:
                shutil.rmtree(path, ignore_errors=True)
            (folder / CHECKPOINT).unlink(missing_ok=True)
    except OSError as exc:
        problem = (f"--checkpoint-dir {folder} cannot be used on {host}: {os_problem(exc)}. HINT: a writable "
                   "folder")
    if problem and lock is not None:
        lock.release()
        lock = None
    return lock, problem


def generation_bytes(model: torch.nn.Module, rows: Any = None) -> int:
    """Estimate one generation's bytes: weights, Adam's two moments, this rank's learnable rows and state."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    held = 0 if rows is None else rows.weight.nbytes + sum(a.nbytes for a in rows.optimizer.state().values())
    return 3 * weights + held


def _writable_parent(path: str, flag: str) -> str:
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{flag} expected a folder it can write in; got {path}: {os_problem(exc)}. HINT: another path"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{flag} expected a writable folder; got {parent} (not writable). HINT: another path"
    return ""


def check_outputs(comm: Any, cfg: TrainConfig, need_bytes: int) -> None:
    """Collective over `comm`: refuse up front outputs that cannot be written, or a --checkpoint-dir without room
    for `need_bytes`."""
    problem = ""
    if comm.rank == 0:
        if cfg.metrics_out:
            problem = _writable_parent(cfg.metrics_out, "--metrics-out")
        if cfg.tensorboard and not problem:
            problem = _writable_parent(os.path.join(cfg.tensorboard, "x"), "--tensorboard")
    if cfg.checkpoint_dir and topology(comm).local_rank == 0 and not problem:  # topology: every rank's collective
        try:
            free = shutil.disk_usage(cfg.checkpoint_dir).free
        except OSError as exc:
            free, problem = 0, f"--checkpoint-dir {cfg.checkpoint_dir}: {os_problem(exc)}. HINT: a writable folder"
        if not problem and free < 1.1 * need_bytes + 2**20:  # the older generations stay until it is complete
            problem = (f"--checkpoint-dir expected room for a checkpoint generation (about {need_bytes / 2**20:.1f} "
                       f"MiB); got {free / 2**20:.1f} MiB free in "
                       f"{cfg.checkpoint_dir}. HINT: free space there or use another --checkpoint-dir")
    check_all(comm, not problem, problem, ConfigError)


def on_behalf(comm: Any, write: Callable[[], None], what: str, hint: str, writer: bool | None = None) -> None:
    """Collective over `comm`: rank 0 (or the `writer` ranks) runs `write`; an OSError becomes one agreed
    ConfigError on every rank, so none waits for a rank that died."""
    problem = ""
    if comm.rank == 0 if writer is None else writer:
        try:
            write()
        except OSError as exc:
            problem = f"expected to write {what}; got {os_problem(exc)}. HINT: {hint}"
    check_all(comm, not problem, problem, ConfigError)


def report_epoch(comm: Any, cfg: TrainConfig, rec: dict[str, Any], write: Callable[[], None]) -> None:
    """Collective over `comm`: rank 0 runs `write` and appends `rec` to --metrics-out."""
    def report() -> None:
        write()
        if cfg.metrics_out:
            append_jsonl(cfg.metrics_out, rec)

    on_behalf(comm, report, f"epoch {rec['epoch']}'s record (--metrics-out {cfg.metrics_out or '-'}, "
              f"--tensorboard {cfg.tensorboard or '-'})", "free space there or use another path; the run stops "
              "here (resume from --checkpoint-dir)")


def keep_best(gen: Path, checkpoint_dir: str) -> Path:
    """Copy generation `gen` to `checkpoint_dir`/best, which pruning never removes, renamed into place so a crash
    leaves the old copy or the new one. Not collective."""
    dest = Path(checkpoint_dir) / "best"
    remove_leftovers(dest)  # a killed run's half copy
    with atomic_dir(dest) as tmp:
        tmp.rmdir()  # copytree makes it
        shutil.copytree(gen, tmp)
    return dest
