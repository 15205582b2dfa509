"""The predictions folder: each rank writes its part's rows as npy into a temporary folder, which becomes OUT
once every rank has written (with its manifest, written last); `load` reads it back in original id order.
numpy and mpi4py only (no torch), never pickle.

    OUT/
      manifest.json       format, num_nodes, fields (dtype, row shape), parts (rows each), pairs, and what
                          made it (checkpoint generation, task, model, emb_layer)
      part-000/
        node_id.npy       int64 [n_p]: the original id of each row (the dataset's numbering)
        pred.npy          the task's prediction per node (node classification: the class, int64)
        emb.npy           float32 [n_p, D]: the rows of layer --emb-layer
        logits.npy        float32 [n_p, C]: the last layer's rows (with --logits)
      part-001/ ...
      pairs/score-000.npy float32: scores of --pairs, each rank's contiguous share in pair order
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from mpignn.errors import ConfigError, mark_agreed
from mpignn.fileio import (fsync_dir, fsync_file, load_npy, read_json, remove_leftovers, replace_dir, save_npy,
                           temp_name, write_durable)
from mpignn.mpi import check_all

__all__ = ["FORMAT", "MANIFEST", "check_out", "write_predictions", "load", "read_manifest"]

FORMAT = 1
MANIFEST = "manifest.json"


def check_out(comm: Any, out: str | os.PathLike, force: bool) -> None:
    """Collective over `comm`: refuse an existing `out` without `force` (rank 0 looks), on every rank alike."""
    problem = ""
    if comm.rank == 0 and Path(out).exists() and not force:
        problem = (f"--out expected a new folder; {out} exists. HINT: pass --force to replace it (only once the "
                   "new predictions are complete), or choose another --out")
    problem = comm.bcast(problem, root=0)
    if problem:
        raise mark_agreed(ConfigError(problem))


def _part_dir(folder: Path, part_id: int) -> Path:
    return folder / f"part-{part_id:03d}"


def write_predictions(comm: Any, out: str | os.PathLike, part_id: int, num_parts: int, num_nodes: int,
                      arrays: dict[str, np.ndarray], *, pair_scores: np.ndarray | None = None,
                      info: dict[str, Any] | None = None) -> Path:
    """Collective over `comm`: write this rank's rows (`arrays`: name -> [n_p, ...], `node_id` among them)
    and share of pair scores; OUT appears, replacing an older one, only once every rank's files are on disk.

    Raises:
        ConfigError: a write failed on some rank (a full disk, ...), on every rank alike; the temporary folder
            is removed and an existing OUT is left as it was.
    """
    out = Path(out)
    tmp, problem = None, ""
    if comm.rank == 0:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            remove_leftovers(out)
            tmp = temp_name(out, "tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        except OSError as exc:
            problem = f"rank 0: {type(exc).__name__}: {exc}"
    tmp, problem = comm.bcast((tmp, problem), root=0)
    fields = {}
    if not problem:
        try:
            here = _part_dir(tmp, part_id)
            here.mkdir()
            for name, array in arrays.items():
                save_npy(here / f"{name}.npy", array)
                fsync_file(here / f"{name}.npy")
                fields[name] = [str(array.dtype), list(array.shape[1:])]
            if pair_scores is not None:
                (tmp / "pairs").mkdir(exist_ok=True)
                save_npy(tmp / "pairs" / f"score-{comm.rank:03d}.npy", pair_scores)
                fsync_file(tmp / "pairs" / f"score-{comm.rank:03d}.npy")
            fsync_dir(here)
        except OSError as exc:
            problem = f"rank {comm.rank}: {type(exc).__name__}: {exc}"
    reports = comm.gather((problem, part_id, len(arrays["node_id"]), fields,
                           None if pair_scores is None else len(pair_scores)), root=0)
    if comm.rank == 0:
        problem = next((p for p, *_ in reports if p), "")
        if not problem:
            try:
                parts = [{"part": p, "rows": int(n)} for _, p, n, _, _ in sorted(reports, key=lambda r: r[1])]
                manifest = {"format": FORMAT, "num_nodes": int(num_nodes), "num_parts": int(num_parts),
                            "fields": reports[0][3], "parts": parts,
                            "pairs": [int(k) for *_, k in reports] if pair_scores is not None else None,
                            **(info or {})}
                text = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
                write_durable(tmp / MANIFEST, lambda f: f.write(text))  # last: the folder counts from here
                replace_dir(tmp, out)
                fsync_dir(out.parent)
            except OSError as exc:
                problem = f"rank 0: {type(exc).__name__}: {exc}"
        if problem and tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    problem = comm.bcast(problem, root=0)
    if problem:
        raise mark_agreed(ConfigError(
            f"--out expected room for the predictions in {out.parent}; got {problem}. HINT: free space there or "
            f"choose another --out; nothing was written to {out}" + (" (the old one is kept)" if out.exists() else "")))
    return out


def read_manifest(out: str | os.PathLike) -> dict[str, Any]:
    """OUT's manifest.

    Raises:
        ConfigError: OUT is not a complete predictions folder.
    """
    path = Path(out) / MANIFEST
    if not path.is_file():
        raise ConfigError(f"expected a predictions folder with {MANIFEST} at {out}; found none. HINT: write one "
                          "with mpirun -np N python -m mpignn.predict --checkpoint-dir DIR --out OUT")
    manifest = read_json(path)
    if manifest.get("format") != FORMAT:
        raise ConfigError(f"{path} has format {manifest.get('format')}; this mpignn reads {FORMAT}. HINT: "
                          "predict again with this version")
    return manifest


def load(out: str | os.PathLike, mmap: bool = True) -> dict[str, np.ndarray]:
    """The predictions in OUT as {field: array}, row i for original node id i (`node_id`, `pred`, `emb`,
    `logits` where written) and `pair_score` (in the order of --pairs) where pairs were scored.

    With one part already in original id order the arrays are the files themselves, memory-mapped (with
    `mmap`); otherwise each field is assembled in memory from the parts' files (each part memory-mapped).
    Not collective.
    """
    out = Path(out)
    manifest = read_manifest(out)
    parts = manifest["parts"]
    ids = [load_npy(_part_dir(out, p["part"]) / "node_id.npy", mmap=mmap) for p in parts]
    n = int(manifest["num_nodes"])
    result: dict[str, np.ndarray] = {}
    in_order = len(parts) == 1 and len(ids[0]) == n and bool(np.array_equal(ids[0], np.arange(n)))
    for name, (dtype, shape) in manifest["fields"].items():
        files = [load_npy(_part_dir(out, p["part"]) / f"{name}.npy", mmap=mmap) for p in parts]
        if in_order:
            result[name] = files[0]
            continue
        array = np.empty((n, *shape), dtype=dtype)
        for gid, rows in zip(ids, files):
            array[gid] = rows
        result[name] = array
    if manifest.get("pairs") is not None:
        pieces = [load_npy(out / "pairs" / f"score-{r:03d}.npy") for r in range(len(manifest["pairs"]))]
        result["pair_score"] = np.concatenate(pieces)
    return result
