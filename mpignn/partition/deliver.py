"""Partition folders delivered over MPI to hosts that do not see them (nodes without a shared filesystem;
docs/node-local.md). A folder is replaced only once whole, and only if it is an mpignn partition (else refused
unless `force`); a part no host holds is refused on every rank, never prepared again.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Callable

from mpignn.errors import PartitionFormatError
from mpignn.fileio import remove_leftovers, replace_dir, sha256_file, temp_name
from mpignn.mpi import check_all
from mpignn.mpi.topology import gather_per_host
from mpignn.mpi.transfer import Move, move_files
from mpignn.partition.format import part_dir

__all__ = ["deliver_partition", "held_by_hosts"]

log = logging.getLogger(__name__)


def _view(folder: Path, usable: Callable[[Path], bool] | None) -> dict[str, Any]:
    """What this host's `folder` holds: META.json's text (None: none, or not `usable`), complete parts, extras."""
    view: dict[str, Any] = {"host": socket.gethostname(), "meta": None, "complete": [], "files": {},
                            "foreign": _foreign(folder)}
    try:
        text = (folder / "META.json").read_text()
        meta = json.loads(text)
        if usable is not None and not usable(folder):
            return view
        view["meta"] = text
        view["complete"] = [k for k in range(len(meta["parts"])) if _part_complete(folder, meta, k)]
        view["present"] = [k for k in range(len(meta["parts"])) if part_dir(folder, k).is_dir()]
    except (OSError, ValueError, KeyError, TypeError, PartitionFormatError):  # unreadable: not held
        return view
    extras = [folder / "node_map.npy"] + (sorted((folder / "links").iterdir()) if (folder / "links").is_dir() else [])
    view["files"] = {str(p.relative_to(folder)): p.stat().st_size for p in extras if p.is_file()}
    return view


def _part_complete(folder: Path, meta: dict, k: int) -> bool:
    try:
        return all((part_dir(folder, k) / f"{name}.npy").stat().st_size == info["bytes"]
                   for name, info in meta["parts"][k]["files"].items())
    except (OSError, KeyError, TypeError):
        return False


def _survey(comm: Any, folder: Path, part_id: int, usable: Callable[[Path], bool] | None) -> list[Any]:
    """Collective over `comm`: on rank 0, each host leader's (parts its host's ranks load, its folder's view)."""
    return gather_per_host(comm, int(part_id), lambda parts: (sorted(set(parts)), _view(folder, usable)))


def _reference(views: list[Any]) -> str | None:
    """The first META.json (rank 0's host's first) whose parts the hosts hold between them, else None."""
    wanted = {k for v in views if v is not None for k in v[0]}
    for entry in views:
        if entry is None or entry[1]["meta"] is None:
            continue
        text = entry[1]["meta"]
        count = len(json.loads(text)["parts"])
        held = {k for v in views if v is not None and v[1]["meta"] == text for k in v[1]["complete"]}
        if {k for k in wanted if k < count} <= held:  # other part counts: the usual checks refuse them
            return text
    return None


def held_by_hosts(comm: Any, folder: str | os.PathLike, part_id: int,
                  usable: Callable[[Path], bool] | None = None) -> bool:
    """Collective over `comm`: whether the hosts hold, between them, every part the ranks load from `folder`
    (`usable`: which folders count, e.g. those with the task's held-out edges)."""
    views = _survey(comm, Path(folder), part_id, usable)
    return bool(comm.bcast(_reference(views) is not None if comm.rank == 0 else None, root=0))


def _holdings(views: list[Any]) -> str:
    held = [(v[1]["host"], ", ".join(f"part-{k:03d}" for k in v[1]["complete"]) if v[1]["meta"] else "no partition")
            for v in views if v is not None]
    return "; ".join(f"{host}: {parts or 'META.json only'}" for host, parts in held)


def _plan(views: list[Any], folder: Path, force: bool) -> tuple[str | None, list[Move], str, dict[int, str]]:
    """Rank 0: (the reference META.json, the moves, a refusal or '', {receiving leader: 'whole'|'missing'})."""
    ref = _reference(views)
    if ref is None:
        wanted = sorted({k for v in views if v is not None for k in v[0]})
        present = {k for v in views if v is not None and v[1]["meta"] for k in v[1].get("present", ())}
        if any(v is not None and v[1]["meta"] for v in views) and not set(wanted) <= present:
            missing = ", ".join(f"part-{k:03d}/" for k in wanted if k not in present)
            return None, [], (
                f"expected the job's hosts to hold parts {wanted} of the partition at {folder} between them; got "
                f"{missing} on none of them ({_holdings(views)}). HINT: run the job on the hosts that hold the "
                "missing parts (the one that partitioned holds them all), or copy the folder there; nothing was "
                "changed"), {}
        return None, [], "", {}  # no folder anywhere, or a damaged part: the usual checks name the file
    meta = json.loads(ref)
    holders = [r for r, v in enumerate(views) if v is not None and v[1]["meta"] == ref]
    part_holder = {k: next(r for r in holders if k in views[r][1]["complete"])
                   for k in {k for r in holders for k in views[r][1]["complete"]}}
    extras_at = holders[0]
    moves: list[Move] = []
    modes: dict[int, str] = {}
    for leader, entry in enumerate(views):
        if entry is None:
            continue
        wants, view = entry
        if any(not 0 <= k < len(meta["parts"]) for k in wants):
            continue  # another number of parts: the usual checks refuse it
        same = view["meta"] == ref
        need = [k for k in wants if not (same and k in view["complete"])]
        extras = {rel: size for rel, size in views[extras_at][1]["files"].items()
                  if not (same and view["files"].get(rel) == size)}
        if not need and not extras:
            continue
        if not same and view["foreign"] and not force:
            return ref, [], view["foreign"], {}
        modes[leader] = "missing" if same else "whole"
        for k in need:
            src = part_holder[k]
            for name, info in meta["parts"][k]["files"].items():
                moves.append(Move(src, leader, f"{part_dir(folder, k).name}/{name}.npy", info["bytes"],
                                  info["sha256"]))
        moves += [Move(extras_at, leader, rel, size, "") for rel, size in sorted(extras.items())]
        if not same:  # META.json last: it marks a complete folder
            moves.append(Move(extras_at, leader, "META.json", len(ref.encode()), ""))
    return ref, moves, "", modes


def deliver_partition(comm: Any, folder: str | os.PathLike, part_id: int, *, force: bool = False,
                      usable: Callable[[Path], bool] | None = None) -> dict[int, int]:
    """Collective over `comm`: make `folder` (the same path on every rank) hold `part_id` on every host; returns
    on rank 0 {leader rank: bytes received}, {} elsewhere. A failure anywhere is refused on every rank."""
    folder = Path(folder)
    views = _survey(comm, folder, part_id, usable)
    plan = _plan(views, folder, force) if comm.rank == 0 else None
    _, moves, refused, modes = comm.bcast(plan, root=0)
    check_all(comm, not refused, refused, PartitionFormatError)
    start = time.perf_counter()
    mode = modes.get(comm.rank)
    write_root, problem = folder, ""
    if mode is not None:
        try:
            remove_leftovers(folder)
            if mode == "whole":
                write_root = temp_name(folder, "incoming")
                shutil.rmtree(write_root, ignore_errors=True)
            write_root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = f"cannot write the partition delivered to {folder} on {socket.gethostname()}: {exc}"
    moves = _with_digests(comm, moves, folder)
    problem = move_files(comm, moves, folder, write_root if not problem else None) or problem
    if mode == "whole":
        try:
            if not problem:
                replace_dir(write_root, folder)
        except OSError as exc:
            problem = f"cannot move the partition delivered to {folder} into place on {socket.gethostname()}: {exc}"
        finally:
            shutil.rmtree(write_root, ignore_errors=True)
    problem = problem and (problem + ". HINT: re-create the partition on a host that holds it whole (python -m "
                           "mpignn.partition --force), or give every host a writable --root")
    check_all(comm, not problem, problem, PartitionFormatError)
    sent = {dst: sum(m.size for m in moves if m.dst == dst) for dst in dict.fromkeys(m.dst for m in moves)}
    if comm.rank == 0:
        for leader, size in sent.items():
            sources = sorted({m.src for m in moves if m.dst == leader})
            log.info("sent %.1f MiB of %s to rank %d from rank(s) %s (%.1fs): its host lacked parts it loads",
                     size / 2**20, folder, leader, ",".join(map(str, sources)), time.perf_counter() - start)
    return sent if comm.rank == 0 else {}


def _with_digests(comm: Any, moves: list[Move], folder: Path) -> list[Move]:
    """`moves` with the sha256 of the files META.json does not record, computed by their senders."""
    mine = {(m.src, m.rel): sha256_file(folder / m.rel) for m in moves
            if not m.sha256 and m.src == comm.rank and (folder / m.rel).is_file()}
    known = {where: digest for part in comm.allgather(mine) for where, digest in part.items()}
    return [m._replace(sha256=m.sha256 or known.get((m.src, m.rel), "missing")) for m in moves]


def _foreign(folder: Path) -> str:
    """Why `folder` must not be replaced by a delivery ('' when absent, empty, or an mpignn partition folder)."""
    what = ""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        what = "a file or link, not a folder"
    elif folder.is_dir() and any(folder.iterdir()):
        try:
            meta = json.loads((folder / "META.json").read_text())
            if not (isinstance(meta, dict) and {"format", "parts", "part_offsets"} <= meta.keys()):
                what = "a META.json that is not an mpignn partition's"
        except (OSError, ValueError):
            what = "a folder without an mpignn META.json"
    if not what:
        return ""
    return (f"expected {folder} on {socket.gethostname()} to be absent or an mpignn partition folder, got {what}; "
            "refusing to replace it with the job's partition. HINT: point --partitions (or --root) at a path of "
            "its own, or pass --force to replace what is there")
