"""Partition folders delivered over MPI to hosts that do not see them (nodes without a shared filesystem).

One rank writes the folder (rank 0, preparing or given `--partitions`). The leader (node-local rank 0) of
every host where that path holds no folder, or another partition, receives from rank 0 what its host's ranks
load: META.json, the held-out edges (`links/`) and their parts, file by file in chunks, each checked against
its sha256, into a temporary folder that is renamed into place only when all of it arrived intact. Hosts that
see the folder (a shared filesystem, or an earlier delivery) receive nothing. `node_map.npy` (original ids,
needed only to read results back) stays with the writer. Only an mpignn partition folder (or nothing) is
ever replaced: anything else at that path is refused on every rank, unless `force`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from mpignn.errors import PartitionFormatError
from mpignn.fileio import remove_leftovers, replace_dir, sha256_file, temp_name
from mpignn.mpi import check_all
from mpignn.partition.format import part_dir

__all__ = ["deliver_partition", "CHUNK_BYTES"]

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 26  # per message; tests lower it to exercise many chunks
_TAG = 7201


def deliver_partition(comm: Any, folder: str | os.PathLike, part_id: int, *, force: bool = False) -> dict[int, int]:
    """Collective over `comm`: make `folder` (the same path on every rank) hold `part_id` on every host.

    A receiving host's leader first removes what killed deliveries of this host left beside the folder
    (`fileio.remove_leftovers`).

    Returns, on rank 0, {leader rank: bytes sent} for the hosts that received files ({} elsewhere, and when
    every host already sees the folder, or rank 0 has none: the usual checks then report it).

    Raises:
        PartitionFormatError: on every rank, when a host could not write or received a corrupt file, or when
            `folder` on a receiving host holds something other than an mpignn partition folder and `force`
            is not set (nothing is then changed there).
    """
    from mpi4py import MPI

    folder = Path(folder)
    meta = _read_meta(folder) if comm.rank == 0 else None
    meta = comm.bcast(meta, root=0)
    if meta is None:
        return {}
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        parts = local.gather(int(part_id), root=0)
        want = None
        fits = local.rank == 0 and all(0 <= k < len(meta.get("parts", ())) for k in parts)
        if fits and comm.rank != 0 and not _complete(folder, meta, set(parts)):  # other part counts: checks refuse
            want = sorted(set(parts))
        refused = _foreign(folder) if want is not None and not force else ""
        check_all(comm, not refused, refused, PartitionFormatError)
        wants = comm.gather(want, root=0)
        sent: dict[int, int] = {}
        problem = ""
        if comm.rank == 0:
            for leader, ids in enumerate(wants):
                if ids is not None:
                    start = time.perf_counter()
                    sent[leader] = _send(comm, folder, meta, ids, leader)
                    log.info("sent %d part(s) of %s to rank %d (%.1f MiB, %.1fs): its host does not see the folder",
                             len(ids), folder, leader, sent[leader] / 2**20, time.perf_counter() - start)
        elif want is not None:
            problem = _receive(comm, folder)
        check_all(comm, not problem, problem, PartitionFormatError)
        return sent
    finally:
        local.Free()


def _foreign(folder: Path) -> str:
    """Why `folder` must not be replaced by a delivery ('' when it is absent, empty, or an mpignn partition
    folder: a META.json with a format, parts and part offsets)."""
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
            "refusing to replace it with rank 0's partition. HINT: point --partitions (or --root) at a path of its "
            "own, or pass --force to replace what is there")


def _read_meta(folder: Path) -> dict | None:
    """META.json as text and data, or None when rank 0 has no readable folder."""
    try:
        text = (folder / "META.json").read_text()
        return {"text": text, **json.loads(text)}
    except (OSError, ValueError):
        return None


def _complete(folder: Path, meta: dict, ids: set[int]) -> bool:
    """This host holds the same META.json and every file of `ids` at its recorded size."""
    try:
        if (folder / "META.json").read_text() != meta["text"]:
            return False
        for k in ids:
            for name, info in meta["parts"][k]["files"].items():
                if (part_dir(folder, k) / f"{name}.npy").stat().st_size != info["bytes"]:
                    return False
    except (OSError, IndexError, KeyError):
        return False
    return True


def _manifest(folder: Path, meta: dict, ids: list[int]) -> list[tuple[str, int, str]]:
    """(relative path, bytes, sha256) of what a host with parts `ids` loads; META.json last (it marks a
    complete folder, as the writer writes it last)."""
    files = []
    links = folder / "links"
    if links.is_dir():
        files += [(f"links/{p.name}", p.stat().st_size, sha256_file(p)) for p in sorted(links.iterdir())]
    for k in ids:
        for name, info in meta["parts"][k]["files"].items():
            files.append((f"{part_dir(folder, k).name}/{name}.npy", info["bytes"], info["sha256"]))
    text = meta["text"].encode()
    return files + [("META.json", len(text), hashlib.sha256(text).hexdigest())]


def _send(comm: Any, folder: Path, meta: dict, ids: list[int], dest: int) -> int:
    from mpi4py import MPI

    manifest = _manifest(folder, meta, ids)
    comm.send(manifest, dest=dest, tag=_TAG)
    buf = np.empty(min(CHUNK_BYTES, max(size for _, size, _ in manifest)), dtype=np.uint8)
    for rel, size, _ in manifest:
        with open(folder / rel, "rb") as f:
            left = size
            while left:
                n = f.readinto(memoryview(buf)[:min(len(buf), left)])
                if not n:  # shorter than META.json says: send zeros, the receiver's checksum refuses them
                    buf[:min(len(buf), left)] = 0
                    n = min(len(buf), left)
                comm.Send([buf[:n], MPI.BYTE], dest=dest, tag=_TAG)
                left -= n
    return sum(size for _, size, _ in manifest)


def _receive(comm: Any, folder: Path) -> str:
    """Receive every file rank 0 sends, even after a failure (so it never blocks); '' or what went wrong."""
    from mpi4py import MPI

    manifest = comm.recv(source=0, tag=_TAG)
    where = f"on {socket.gethostname()}"
    tmp = temp_name(folder, "incoming")
    problem = ""
    try:
        remove_leftovers(folder)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    except OSError as exc:
        problem = f"cannot write the partition delivered to {folder} {where}: {exc}"
    buf = np.empty(min(CHUNK_BYTES, max(size for _, size, _ in manifest)), dtype=np.uint8)
    for rel, size, digest in manifest:
        out, check = None, hashlib.sha256()
        if not problem:
            try:
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                out = open(tmp / rel, "wb")
            except OSError as exc:
                problem = f"cannot write the partition delivered to {folder} {where}: {exc}"
        left = size
        while left:
            n = min(len(buf), left)
            comm.Recv([buf[:n], MPI.BYTE], source=0, tag=_TAG)
            check.update(buf[:n])
            if out is not None:
                try:
                    out.write(buf[:n])
                except OSError as exc:
                    problem, out = f"cannot write the partition delivered to {folder} {where}: {exc}", None
            left -= n
        if out is not None:
            out.close()
        if not problem and check.hexdigest() != digest:
            problem = f"{rel} of {folder} arrived {where} with a wrong sha256 (corrupt at the sender)"
    try:
        if not problem:
            replace_dir(tmp, folder)
    except OSError as exc:
        problem = f"cannot move the partition delivered to {folder} into place {where}: {exc}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return problem + (". HINT: re-create the partition on rank 0's host (python -m mpignn.partition --force), "
                      "or give every host a writable --root" if problem else "")
