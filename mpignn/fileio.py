"""Crash-safe files: write to a temporary name, then rename, so a reader sees the whole thing or nothing.
Also hashing and pickle-free npy loading. Stdlib and numpy only.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import numpy as np

__all__ = ["atomic_dir", "atomic_path", "replace_dir", "write_json", "read_json", "sha256_file", "load_npy", "save_npy"]


@contextlib.contextmanager
def atomic_path(final: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside `final`; on success rename it over `final`, on failure delete it."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}{suffix}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder beside `final`; on success it becomes `final` (an old `final` is
    replaced only then), on failure it is removed. Two writers racing for the same new `final` both succeed
    with one writer's (identical) content."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        replace_dir(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def replace_dir(tmp: Path, final: Path) -> None:
    """Rename the complete folder `tmp` to `final`; an old `final` is moved aside first and removed after."""
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        try:
            os.replace(tmp, final)
        except OSError:
            # Another process (rank 0 of another host on a shared disk) renamed the same content into
            # place first; callers write deterministic content, so theirs is as good as ours.
            if not final.is_dir():
                raise


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
