"""Checkpoints on hosts that share no disk: before a resume, copy over MPI to every host what its ranks load
of the newest generation any host holds. What no host holds is refused, never a fresh start
(docs/node-local.md). Stdlib and mpi4py (through `comm`); no torch.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from mpignn.errors import ConfigError
from mpignn.mpi import check_all
from mpignn.mpi.topology import gather_per_host
from mpignn.mpi.transfer import Move, move_files

__all__ = ["bring_generation", "CHECKPOINT", "MANIFEST", "rows_name", "read_manifest", "corrupt_manifest"]

# A generation's files (checkpoint.py writes them; named here, where no torch is imported)
MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint.pt"


def rows_name(rank: int) -> str:
    return f"embedding-rank{rank}.npz"


def read_manifest(text: str | bytes) -> dict[str, Any]:
    """Parse a generation's manifest. Raises ValueError when it is not a JSON object (torn, or not ours)."""
    manifest = json.loads(text)
    if not isinstance(manifest, dict):
        raise ValueError(f"expected a JSON object; got {type(manifest).__name__}")
    return manifest


def corrupt_manifest(where: Path, exc: BaseException) -> str:
    """The refusal of generation `where` whose manifest (or what it names) cannot be read: resume the one before."""
    return (f"cannot resume from {where}/{MANIFEST}: {type(exc).__name__}: {str(exc)[:200]}. HINT: the manifest is "
            f"corrupt; delete {where} to resume from the checkpoint before it")


def _view(folder: Path, name: str | None) -> dict[str, Any]:
    held: dict[str, Any] = {}
    if not folder.is_dir():
        return held
    candidates = [folder / name] if name else [p for p in folder.iterdir() if p.name.startswith("gen-")]
    for gen in candidates:
        try:
            text = (gen / MANIFEST).read_bytes().decode("utf-8", "replace")  # not UTF-8: `_plan` refuses it
            files = {p.name: p.stat().st_size for p in gen.iterdir() if p.is_file() and p.name != MANIFEST}
        except OSError:
            continue
        held[gen.name] = {"manifest": text, "files": files}
    return held


def _newest(views: list[Any]) -> str | None:
    names = {n for v in views if v is not None for n in v["held"] if n.startswith("gen-") and n[4:].isdigit()}
    return max(names, key=lambda n: int(n[4:]), default=None)


def _plan(views: list[Any], folder: Path, name: str) -> tuple[list[Move], str]:
    """Rank 0: the moves that give every host what its ranks load of `name`, or a refusal."""
    holders = [(r, v) for r, v in enumerate(views) if v is not None and name in v["held"]]
    manifests = {v["held"][name]["manifest"] for _, v in holders}
    if len(manifests) > 1:
        seen = "; ".join(f"{v['host']}: epoch {_field(v, name, 'epoch')} step {_field(v, name, 'step')}"
                         for _, v in holders)
        return [], (f"expected one checkpoint named {name} in {folder} across the job's hosts; got different ones "
                    f"({seen}). HINT: a node-local --checkpoint-dir of another run is left on one host: delete "
                    f"{folder}/{name} on the hosts whose copy is stale, then resume")
    text = manifests.pop()
    try:
        files = dict(read_manifest(text).get("files", {}))
    except (ValueError, TypeError) as exc:  # rank 0 alone reads it: refused through the bcast, on every rank
        return [], corrupt_manifest(folder / name, exc)
    moves: list[Move] = []
    for leader, view in enumerate(views):
        if view is None:
            continue
        mine = view["held"].get(name, {}).get("files", {})
        need = [CHECKPOINT] + [rows_name(r) for r in view["ranks"] if rows_name(r) in files]
        missing = [f for f in need if f not in mine]
        for f in missing:
            src = next((r for r, v in holders if f in v["held"][name]["files"]), None)
            if src is None:
                return [], (f"expected {folder}/{name}/{f} on a host of this job; none of "
                            f"{', '.join(v['host'] for v in views if v is not None)} holds it. HINT: run the job on "
                            f"the hosts of the run that saved it, or delete {folder}/{name} on "
                            f"{', '.join(v['host'] for _, v in holders)} to resume from the generation before it")
            moves.append(Move(src, leader, f"{name}/{f}", views[src]["held"][name]["files"][f], files.get(f, "")))
        if missing:  # the manifest last: the generation counts on this host once all of it arrived
            data = text.encode()
            moves.append(Move(holders[0][0], leader, f"{name}/{MANIFEST}", len(data),
                              hashlib.sha256(data).hexdigest()))
    return moves, ""


def _field(view: dict[str, Any], name: str, key: str) -> Any:
    try:
        return read_manifest(view["held"][name]["manifest"]).get(key, "?")
    except ValueError:
        return "?"


def bring_generation(comm: Any, folder: str | os.PathLike, name: str | None = None) -> str | None:
    """Collective over `comm`: make generation `name` (default: the newest any host holds) complete on every host;
    return its name, None when no host holds one. Agreed ConfigError: hosts hold different generations of that
    name, a file of it no host holds, or a copy failed (a full disk, a corrupt file at the sender)."""
    folder = Path(folder)
    views = gather_per_host(comm, comm.rank,
                            lambda ranks: {"host": socket.gethostname(), "ranks": ranks, "held": _view(folder, name)})
    plan: tuple[str | None, list[Move], str] = (None, [], "")
    if comm.rank == 0:
        chosen = (name if any(v is not None and name in v["held"] for v in views) else None) if name else \
            _newest(views)
        plan = (chosen, *_plan(views, folder, chosen)) if chosen else (None, [], "")
    chosen, moves, refused = comm.bcast(plan, root=0)
    check_all(comm, not refused, refused, ConfigError)
    problem = move_files(comm, moves, folder, folder)
    check_all(comm, not problem, (f"cannot copy checkpoint {chosen} to this host: {problem}. HINT: free space in "
                                  f"--checkpoint-dir there, or run on the hosts that hold it"), ConfigError)
    return chosen
