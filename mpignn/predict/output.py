"""The predictions folder (its layout: docs/predict.md): it becomes OUT only once every rank has written, its
manifest last; `load` reads it back in original id order. Type folders are named by schema index, never by
the dataset's type names. Never pickle.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from mpignn.errors import ConfigError, mark_agreed
from mpignn.mpi.commit import commit_folder, manifest_bytes, os_problem
from mpignn.mpi.transfer import Move, move_files, sees_rank0
from mpignn.fileio import (fsync_path, load_npy, read_json, remove_leftovers, replace_dir, save_npy,
                           sha256_file, temp_name, write_durable)

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


def _type_dir(k: int) -> str:
    return f"type-{k}"


def write_predictions(comm: Any, out: str | os.PathLike, part_id: int, num_parts: int, num_nodes: int,
                      arrays: dict[str, Any], *, pair_scores: np.ndarray | None = None,
                      info: dict[str, Any] | None = None, node_types: dict[str, int] | None = None) -> Path:
    """Collective over `comm`: write this rank's rows (`arrays`, per type with `node_types`) and pair scores;
    OUT appears, replacing an older one, only once every rank's files are on disk. A write that failed on some
    rank is a ConfigError on every rank alike; an existing OUT is left as it was.
    """
    out = Path(out)
    hint = f"HINT: free space there or choose another --out; nothing was written to {out}"
    tmp, problem = None, ""
    if comm.rank == 0:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            remove_leftovers(out)
            tmp = temp_name(out, "tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        except OSError as exc:
            problem = f"rank 0: {os_problem(exc)}"
    tmp, problem = comm.bcast((tmp, problem), root=0)
    if problem:
        raise mark_agreed(ConfigError(f"--out expected room for the predictions in {out.parent}; got {problem}. "
                                      + hint + (" (the old one is kept)" if out.exists() else "")))
    groups = ({_type_dir(k): arrays[t] for k, t in enumerate(node_types)} if node_types is not None
              else {"": arrays})  # "": the part's folder itself
    # node-local disks: a rank whose host does not see rank 0's folder writes its files on its own host, then
    # sends them to rank 0, whose host holds OUT whole
    remote = comm.size > 1 and not sees_rank0(comm, tmp)

    def write_own() -> tuple[int, dict[str, int], dict[str, dict[str, list]], int | None, list]:
        fields: dict[str, dict[str, list]] = {g: {} for g in groups}
        here = _part_dir(tmp, part_id)
        here.mkdir(parents=remote)
        for g, group in groups.items():
            where = here / g
            where.mkdir(exist_ok=True)
            for name, array in group.items():
                save_npy(where / f"{name}.npy", array)
                fsync_path(where / f"{name}.npy")
                fields[g][name] = [str(array.dtype), list(array.shape[1:])]
            if g:
                fsync_path(where)
        if pair_scores is not None:
            (tmp / "pairs").mkdir(parents=remote, exist_ok=True)
            save_npy(tmp / "pairs" / f"score-{comm.rank:03d}.npy", pair_scores)
            fsync_path(tmp / "pairs" / f"score-{comm.rank:03d}.npy")
            fsync_path(tmp / "pairs")
        fsync_path(here)
        rows = {g: len(group["node_id"]) for g, group in groups.items()}
        mine = [here, *([tmp / "pairs" / f"score-{comm.rank:03d}.npy"] if pair_scores is not None else [])]
        sent = [(str(p.relative_to(tmp)), p.stat().st_size, sha256_file(p)) for top in mine
                for p in ([top] if top.is_file() else sorted(top.rglob("*"))) if p.is_file()] if remote else []
        return part_id, rows, fields, None if pair_scores is None else len(pair_scores), sent

    def prepare(reports: list[tuple[int, dict[str, int], dict[str, dict[str, list]], int | None, list]]) -> tuple:
        ordered = sorted(reports, key=lambda r: r[0])
        parts = [{"part": p, "rows": int(sum(n.values()))} for p, n, *_ in ordered]
        manifest = {"format": FORMAT, "num_nodes": int(num_nodes), "num_parts": int(num_parts), "parts": parts,
                    "pairs": [int(r[3]) for r in reports] if pair_scores is not None else None, **(info or {})}
        if node_types is None:
            manifest["fields"] = reports[0][2][""]
        else:
            manifest["node_types"] = {
                t: {"folder": _type_dir(k), "num_nodes": int(node_types[t]), "fields": reports[0][2][_type_dir(k)],
                    "parts": [{"part": p, "rows": int(n[_type_dir(k)])} for p, n, *_ in ordered]}
                for k, t in enumerate(node_types)}
        return manifest, [Move(r, 0, *f) for r, report in enumerate(reports) for f in report[4]]

    def finish(payload: tuple[dict, list[Move]]) -> None:
        manifest, moves = payload
        problem = move_files(comm, moves, tmp, tmp)
        if problem:
            raise OSError(problem)
        if comm.rank == 0:
            write_durable(tmp / MANIFEST, lambda f: f.write(manifest_bytes(manifest)))  # last: the folder counts
            replace_dir(tmp, out)
            fsync_path(out.parent)

    problem = commit_folder(comm, write_own, prepare, finish, writer=comm.rank == 0 or remote,
                            cleanup=lambda: shutil.rmtree(tmp, ignore_errors=True))
    if remote:  # sent (or failed): this host's copy goes
        shutil.rmtree(tmp, ignore_errors=True)
    if problem:
        raise mark_agreed(ConfigError(f"--out expected room for the predictions in {out.parent}; got {problem}. "
                                      + hint + (" (the old one is kept)" if out.exists() else "")))
    return out


def read_manifest(out: str | os.PathLike) -> dict[str, Any]:
    """OUT's manifest; ConfigError where OUT is not a complete predictions folder."""
    path = Path(out) / MANIFEST
    if not path.is_file():
        raise ConfigError(f"expected a predictions folder with {MANIFEST} at {out}; found none. HINT: write one "
                          "with mpirun -np N python -m mpignn.predict --checkpoint-dir DIR --out OUT")
    manifest = read_json(path)
    if manifest.get("format") != FORMAT:
        raise ConfigError(f"{path} has format {manifest.get('format')}; this mpignn reads {FORMAT}. HINT: "
                          "predict again with this version")
    return manifest


def load(out: str | os.PathLike, mmap: bool = True) -> dict[str, Any]:
    """The predictions in OUT as {field: array} (per node type on a heterogeneous graph), row i for original
    id i, and `pair_score` where pairs were scored; one part already in id order is memory-mapped. Not collective.
    """
    out = Path(out)
    manifest = read_manifest(out)
    if "node_types" in manifest:
        folders = [str(info.get("folder")) for info in manifest["node_types"].values()]
        bad = [f for f in folders if not re.fullmatch(r"type-\d+", f)]
        if bad:  # a manifest names folders inside OUT only
            raise ConfigError(f"{out / MANIFEST} expected node type folders named type-K; got {bad[0]!r}. HINT: "
                              "predict again with python -m mpignn.predict")
        return {t: _assemble(out, info["parts"], info["fields"], int(info["num_nodes"]), info["folder"], mmap)
                for t, info in manifest["node_types"].items()}
    result = _assemble(out, manifest["parts"], manifest["fields"], int(manifest["num_nodes"]), "", mmap)
    if manifest.get("pairs") is not None:
        pieces = [load_npy(out / "pairs" / f"score-{r:03d}.npy") for r in range(len(manifest["pairs"]))]
        result["pair_score"] = np.concatenate(pieces)
    return result


def _assemble(out: Path, parts: list[dict], fields: dict[str, list], n: int, sub: str,
              mmap: bool) -> dict[str, np.ndarray]:
    ids = [load_npy(_part_dir(out, p["part"]) / sub / "node_id.npy", mmap=mmap) for p in parts]
    result: dict[str, np.ndarray] = {}
    in_order = len(parts) == 1 and len(ids[0]) == n and bool(np.array_equal(ids[0], np.arange(n)))
    for name, (dtype, shape) in fields.items():
        files = [load_npy(_part_dir(out, p["part"]) / sub / f"{name}.npy", mmap=mmap) for p in parts]
        if in_order:
            result[name] = files[0]
            continue
        array = np.empty((n, *shape), dtype=dtype)
        for gid, rows in zip(ids, files):
            array[gid] = rows
        result[name] = array
    return result
