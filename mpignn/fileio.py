"""Crash-safe files: write to a temporary name, then rename, so a reader sees the whole thing or nothing.
Also hashing, pickle-free npy loading and the refusal of an unwritable folder.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
from glob import escape as glob_escape
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

from mpignn.errors import ConfigError

__all__ = ["atomic_dir", "atomic_path", "replace_dir", "write_json", "read_json", "sha256_file", "load_npy", "save_npy",
           "write_durable", "fsync_path", "temp_name", "remove_leftovers", "this_host",
           "refuse_unwritable"]

log = logging.getLogger(__name__)

# `.NAME.KIND-PID@HOST[.ext]`: every temporary name mpignn makes beside a file or folder NAME says which process
# on which host made it, so a later run can tell the leftovers of a killed one from a writer still at work.
_TEMP_KINDS = ("tmp", "old", "incoming", "parhip")
_TEMP = re.compile(r"^\.(?P<final>.+)\.(?P<kind>" + "|".join(_TEMP_KINDS) +
                   r")-(?P<pid>\d+)@(?P<host>[A-Za-z0-9_-]+)(?P<ext>\.[A-Za-z0-9]+)?$")


def this_host() -> str:
    """This host's name as temporary names carry it (letters, digits, '-' and '_' only)."""
    return re.sub(r"[^A-Za-z0-9-]", "_", socket.gethostname()) or "_"


def temp_name(final: str | os.PathLike, kind: str, suffix: str = "") -> Path:
    """The temporary name of kind `kind` (tmp, old, incoming, parhip) beside `final` for this process."""
    final = Path(final)
    return final.with_name(f".{final.name}.{kind}-{os.getpid()}@{this_host()}{suffix}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only whether it exists (this process too)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, under another user
        pass
    return True


def remove_leftovers(final: str | os.PathLike) -> list[Path]:
    """Remove and return the temporary names beside `final` left by dead processes of this host (never a
    live one's, nor another host's on a shared filesystem)."""
    final = Path(final)
    removed: list[Path] = []
    host = this_host()
    for entry in sorted(final.parent.glob(glob_escape(f".{final.name}.") + "*-*@*")):
        m = _TEMP.match(entry.name)
        if m is None or m["final"] != final.name or m["host"] != host or _alive(int(m["pid"])):
            continue
        with contextlib.suppress(FileNotFoundError):  # another rank of this host removed it first
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry)
            log.warning("removed %s: left by a killed run (pid %s on this host is gone)", entry, m["pid"])
    return removed


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `final`; on success rename it over `final`, on failure delete it."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(final, "tmp", suffix)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder beside `final`; on success it replaces `final`, on failure it goes.

    Two writers racing for the same new `final` both succeed with one's (identical) content."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(final, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        replace_dir(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EEXIST)
"""Why a folder cannot take what is written there (not a missing input file: the readers' own errors say that);
EEXIST is mkdir's answer where a file stands in a folder's place."""


@contextlib.contextmanager
def refuse_unwritable(flag: str, path: object, what: str, hint: str) -> Iterator[None]:
    """Turn the block's OSError that says `path` cannot be written (read-only, full, a file where a folder goes)
    into one line instead of a traceback (a ConfigError: `{flag} expected a folder where {what}; got {path}:
    {the OSError}. HINT: {hint}`); other errors pass through.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno not in _UNWRITABLE:
            raise
        raise ConfigError(f"{flag} expected a folder where {what}; got {path}: {type(exc).__name__}: {exc}. "
                          f"HINT: {hint}") from None


def replace_dir(tmp: Path, final: Path) -> None:
    """Rename the complete folder `tmp` to `final`; an old `final` is moved aside first and removed after."""
    if final.exists():
        old = temp_name(final, "old")
        os.replace(final, old)
        try:
            os.replace(tmp, final)
        except OSError:
            os.replace(old, final)  # the previous folder back in place
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        try:
            os.replace(tmp, final)
        except OSError:
            # Another process (rank 0 of another host on a shared disk) renamed the same content into
            # place first; callers write deterministic content, so theirs is as good as ours.
            if not final.is_dir():
                raise


def write_durable(final: str | os.PathLike, write: Callable[[BinaryIO], None]) -> Path:
    """Write `final` with `write(f)` so that it survives a host crash (file and folder fsync'd). On an OSError
    (a full or failing disk) `final` is as it was, and the temporary file is gone.
    """
    final = Path(final)
    with atomic_path(final) as tmp:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    fsync_path(final.parent)
    return final


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a written file's content (before renaming it into place), or a folder's entries (new names, renames,
    removals), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)


def load_npy(path: str | os.PathLike, mmap: bool = False) -> np.ndarray:
    """np.load with pickles refused; `mmap` maps the file instead of reading it."""
    return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
