"""The preprocessed-graph cache (`<root>/mpignn-cache/<name>/`) and content fingerprints; numpy only, no torch.
Written whole and renamed into place, and checked against meta.json's sizes and hashes, so neither a crash nor
a changed file leaves a cache that a later run trusts.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from mpignn.data.graph import GraphData
from mpignn.data.hetero import HeteroSchema
from mpignn.fileio import atomic_dir, load_npy, read_json, remove_leftovers, save_npy, write_json

__all__ = ["cache_dir", "save_cache", "load_cache", "content_hash", "fingerprint"]

log = logging.getLogger(__name__)

_ARRAYS = ("rowptr", "col", "x", "y", "train_idx", "val_idx", "test_idx")
FORMAT = 2  # 2: meta.json["files"] holds each array's bytes and content hash (format 1 caches are rebuilt)
# Larger files are hashed by three SAMPLE_BYTES samples and their size, so a multi-GiB file costs 3 MiB of reads.
FULL_HASH_BYTES = 64 << 20
SAMPLE_BYTES = 1 << 20


def cache_dir(root: str, name: str) -> Path:
    return Path(root) / "mpignn-cache" / name.replace("/", "_").replace(":", "_")


def content_hash(path: str | os.PathLike) -> str:
    """sha256 of the file's size and content: all of it up to FULL_HASH_BYTES, else three samples."""
    size = os.stat(path).st_size
    h = hashlib.sha256(f"{size}|".encode())
    with open(path, "rb") as f:
        if size <= FULL_HASH_BYTES:
            while block := f.read(1 << 22):
                h.update(block)
        else:
            for start in (0, (size - SAMPLE_BYTES) // 2, size - SAMPLE_BYTES):
                f.seek(start)
                h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()


def fingerprint(path: str | os.PathLike) -> str:
    """A short content fingerprint of a file or a folder's files (no subfolders); path and mtime do not count.
    An unreadable path gets one of its own (loading it reports the problem)."""
    path = Path(path)
    h = hashlib.sha256(b"content")
    try:
        if path.is_dir():
            for file in sorted(p for p in path.iterdir() if p.is_file()):
                h.update(f"|{file.name}|{content_hash(file)}".encode())
        else:
            h.update(f"|{content_hash(path)}".encode())
    except OSError as exc:
        h.update(f"|unreadable: {exc.strerror}".encode())
    return h.hexdigest()[:16]


def save_cache(root: str, graph: GraphData, source: str = "") -> Path:
    final = cache_dir(root, graph.name)
    remove_leftovers(final)  # what killed writers of this host left beside it
    with atomic_dir(final) as tmp:
        names = [*_ARRAYS, *(("edge_type",) if graph.schema is not None else ())]
        for key in names:
            save_npy(tmp / f"{key}.npy", getattr(graph, key))
        files = {key: {"bytes": (tmp / f"{key}.npy").stat().st_size, "hash": content_hash(tmp / f"{key}.npy")}
                 for key in names}
        write_json(tmp / "meta.json", {"format": FORMAT, "name": graph.name, "num_classes": graph.num_classes,
                                       "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
                                       "meta": graph.meta, "files": files, "source": source,
                                       "hetero": graph.schema.to_json() if graph.schema is not None else None})
    return final


def _mismatch(folder: Path, meta: dict, names: list[str]) -> str:
    """The first array that does not match meta.json's manifest ('' when all do)."""
    files = meta.get("files")
    if not isinstance(files, dict):
        return "meta.json lists no array sizes and hashes"
    for key in names:
        path, info = folder / f"{key}.npy", files.get(key)
        if not isinstance(info, dict):
            return f"meta.json lists no {key}.npy"
        try:
            size = path.stat().st_size
            if size != info.get("bytes"):
                return f"{key}.npy has {size} bytes, meta.json says {info.get('bytes')}"
            if content_hash(path) != info.get("hash"):
                return f"{key}.npy does not match its hash in meta.json"
        except OSError as exc:
            return f"{key}.npy cannot be read ({exc.strerror})"
    return ""


def load_cache(root: str, name: str, mmap: bool = False, source: str | None = None) -> GraphData | None:
    """The cached graph, or None (logged; the caller rebuilds it) when incomplete, not matching meta.json, or
    built from other files than `source` fingerprints."""
    folder = cache_dir(root, name)
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = read_json(meta_path)
    except (OSError, ValueError) as exc:
        log.warning("dataset cache %s: unreadable meta.json (%s); rebuilding it", folder, exc)
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        log.warning("dataset cache %s has format %s, this mpignn writes %d; rebuilding it", folder,
                    meta.get("format") if isinstance(meta, dict) else "?", FORMAT)
        return None
    if source is not None and meta.get("source") != source:
        log.warning("dataset cache %s was built from other files than those under %s now; rebuilding it",
                    folder, root)
        return None
    names = [*_ARRAYS, *(("edge_type",) if meta.get("hetero") else ())]
    problem = _mismatch(folder, meta, names)
    if problem:
        log.warning("dataset cache %s: %s; rebuilding it", folder, problem)
        return None
    try:  # fields a hand-edited (or another tool's) meta.json may lack or spoil: rebuilt like any mismatch
        schema = {"schema": HeteroSchema.from_json(meta["hetero"])} if meta.get("hetero") else {}
        name, num_classes, extra = str(meta["name"]), int(meta["num_classes"]), dict(meta.get("meta", {}))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning("dataset cache %s: meta.json field %s; rebuilding it", folder, exc)
        return None
    arrays = {k: load_npy(folder / f"{k}.npy", mmap=mmap) for k in names}
    return GraphData(name=name, num_classes=num_classes, meta=extra, **arrays, **schema)
