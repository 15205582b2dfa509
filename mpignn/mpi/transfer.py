"""Files moved over MPI between hosts that share no disk, each checked against its sha256 and renamed into place
once whole. A receiver writes under `mpignn.fileio.temp_name`, so `remove_leftovers` recognises a killed receiver's
file.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import socket
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from mpignn.fileio import fsync_path, temp_name
from mpignn.mpi.commit import os_problem

__all__ = ["Move", "move_files", "sees_rank0", "CHUNK_BYTES"]

CHUNK_BYTES = 1 << 26  # per message; tests lower it to exercise many chunks
_TAG = 7201


class Move(NamedTuple):
    """One file copied from rank `src`'s `folder/rel` to rank `dst`'s (the same relative path)."""
    src: int
    dst: int
    rel: str
    size: int
    sha256: str


def sees_rank0(comm: Any, folder: str | os.PathLike) -> bool:
    """Collective over `comm`: whether this rank sees rank 0's `folder` (a shared filesystem), by a probe file.
    Rank 0 must have created `folder`."""
    token = secrets.token_hex(8) if comm.rank == 0 else None
    probe = None
    if comm.rank == 0:
        probe = Path(folder) / f".mpignn-probe-{token}@{socket.gethostname()}"
        try:
            probe.touch()
        except OSError:
            probe = None  # rank 0 cannot write there: the write itself will say so
    token = comm.bcast(token if probe is not None else None, root=0)
    seen = comm.rank == 0 or (token is not None and any(Path(folder).glob(f".mpignn-probe-{token}@*")))
    comm.barrier()
    if probe is not None:
        probe.unlink(missing_ok=True)
    return bool(seen)


def move_files(comm: Any, moves: list[Move], read_root: str | os.PathLike | None,
               write_root: str | os.PathLike | None) -> str:
    """Collective over `comm` (the same `moves` everywhere, run in order, so no two ranks wait on each other):
    copy each file in chunks. Returns "" or, on a receiver, what went wrong (it keeps receiving, so its senders
    never block); agree on it with `check_all`. `write_root` None: a receiver that already failed discards.
    """
    problem = ""
    where = f"on {socket.gethostname()}"
    size = max((m.size for m in moves if comm.rank in (m.src, m.dst)), default=0)
    buf = np.empty(max(1, min(CHUNK_BYTES, size)), dtype=np.uint8)
    for move in moves:
        if move.src == comm.rank == move.dst:
            continue
        if move.src == comm.rank:
            _send(comm, Path(read_root) / move.rel, move, buf)
        elif move.dst == comm.rank:
            skip = bool(problem) or write_root is None  # this receiver failed already: it discards
            bad = _receive(comm, None if skip else Path(write_root) / move.rel, move, buf)
            problem = problem or (bad and f"{bad} {where}")
    return problem


def _send(comm: Any, path: Path, move: Move, buf: np.ndarray) -> None:
    from mpi4py import MPI

    try:
        f = open(path, "rb")
    except OSError:
        f = None  # zeros follow: the receiver's checksum refuses them
    for done in range(0, move.size, len(buf)):
        n = min(len(buf), move.size - done)
        got = f.readinto(memoryview(buf)[:n]) if f is not None else 0
        if got < n:
            buf[got:n] = 0
        comm.Send([buf[:n], MPI.BYTE], dest=move.dst, tag=_TAG)
    if f is not None:
        f.close()


def _receive(comm: Any, path: Path | None, move: Move, buf: np.ndarray) -> str:
    from mpi4py import MPI

    out, check, problem = None, hashlib.sha256(), ""
    tmp = temp_name(path, "incoming") if path is not None else None
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            out = open(tmp, "wb")
        except OSError as exc:
            problem = f"cannot write {path}: {os_problem(exc)}"
    for done in range(0, move.size, len(buf)):
        n = min(len(buf), move.size - done)
        comm.Recv([buf[:n], MPI.BYTE], source=move.src, tag=_TAG)
        check.update(buf[:n])
        if out is not None:
            try:
                out.write(buf[:n])
            except OSError as exc:
                problem, out = f"cannot write {path}: {os_problem(exc)}", None
    if out is None:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        return problem
    try:
        out.close()
        if check.hexdigest() != move.sha256:
            problem = f"{move.rel} arrived from rank {move.src} with a wrong sha256 (corrupt at the sender)"
        else:
            fsync_path(tmp)
            os.replace(tmp, path)
            fsync_path(path.parent)
    except OSError as exc:
        problem = f"cannot write {path}: {os_problem(exc)}"
    finally:
        tmp.unlink(missing_ok=True)
    return problem
