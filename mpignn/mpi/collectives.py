"""Checked collectives on numpy buffers; each first waits in `all_arrived`, which sleeps instead of spinning."""
from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from mpignn.errors import MpignnError, mark_agreed
from mpignn.mpi.topology import mpi_op
from mpignn.mpi.watchdog import bounded

__all__ = ["check_all", "checked", "check_same", "MAX_COUNT", "exchange_counts", "alltoallv", "allreduce_sum", "allreduce_max",
           "all_arrived", "sleep_until"]


def check_all(comm: Any, ok: bool, message: str, error: type[MpignnError] = MpignnError) -> None:
    """Collective over `comm`: raise the same `error` on every rank if `ok` is False on any rank.

    Every rank raises, so none is left waiting in the next collective; the lowest failing rank's message is used.
    """
    with bounded("check_all (allreduce)"):
        all_arrived(comm)
        if comm.allreduce(bool(ok), op=mpi_op("LAND")):
            return
        failed = [(r, m) for r, m in enumerate(comm.allgather(None if ok else message)) if m is not None]
    rank, first = failed[0]
    prefix = f"rank {rank}: " if comm.size > 1 else ""
    raise mark_agreed(error(prefix + first))


@contextmanager
def checked(comm: Any, error: type[MpignnError], catch: type[BaseException] = MpignnError) -> Iterator[None]:
    """Collective over `comm` on leaving the block: a `catch` error the block raises on any rank becomes the
    same `error` on every rank (`check_all` of its text), so no rank runs on past a check another one failed;
    other errors propagate at once."""
    problem = ""
    try:
        yield
    except catch as exc:
        problem = str(exc)
    check_all(comm, not problem, problem, error)


def check_same(comm: Any, values: Mapping[str, Any], what: str, hint: str, error: type[MpignnError] = MpignnError) -> None:
    """Collective over `comm`: raise the same `error` on every rank unless all hold the same JSON-able `values`.

    Compared by digest (one small allgather); the error names the first differing key. For what must agree
    before anything depends on it: a resolved configuration, a version.
    """
    text = json.dumps(values, sort_keys=True, default=str)
    with bounded(f"check_same {what} (allgather)"):
        all_arrived(comm)
        digests = comm.allgather(hashlib.sha256(text.encode()).hexdigest())
        if len(set(digests)) == 1:
            return
        first = next(r for r, d in enumerate(digests) if d != digests[0])
        theirs = comm.bcast(json.loads(text) if comm.rank == first else None, root=first)
        ours = comm.bcast(json.loads(text) if comm.rank == 0 else None, root=0)
    key = next(k for k in sorted(set(ours) | set(theirs)) if ours.get(k, "<unset>") != theirs.get(k, "<unset>"))
    raise mark_agreed(error(f"expected every rank to run with the same {what}; got {key} = "
                            f"{theirs.get(key, '<unset>')!r} on rank {first} and {ours.get(key, '<unset>')!r} on "
                            f"rank 0. HINT: {hint}"))


_SPIN_S, _FIRST_PAUSE_S, _LONGEST_PAUSE_S = 2e-4, 5e-5, 5e-4


def sleep_until(ready: Callable[[], Any], seconds: float | None = None, longest: float = _LONGEST_PAUSE_S) -> bool:
    """Poll `ready()` until it is true, sleeping between tries; return False if `seconds` pass first (None: never).

    MPICH's blocking calls spin at full CPU while they wait, taking the core of processes with work. A peer a
    moment away costs no sleep: the first tries go without one, then the pause doubles up to `longest` seconds."""
    start = time.monotonic()
    pause = _FIRST_PAUSE_S
    while not ready():
        waited = time.monotonic() - start
        if seconds is not None and waited > seconds:
            return False
        if waited > _SPIN_S:
            time.sleep(pause)
            pause = min(2 * pause, longest)
    return True


def all_arrived(comm: Any) -> None:
    """Collective over `comm`: return once every rank has called it, polling a nonblocking barrier with sleeps
    (`sleep_until`); the blocking call after this runs with every rank present, at full speed. Costs one barrier.
    """
    if comm.size > 1:
        sleep_until(comm.Ibarrier().Test)


# The most rows (one datatype each) one MPI call moves: counts and displacements are C ints. Tests lower it.
MAX_COUNT = 2**31 - 1
_ALLTOALLV_TAG = 7102


def exchange_counts(comm: Any, counts: np.ndarray) -> tuple[np.ndarray, bool]:
    """Collective over `comm`, one Alltoall: return (rows received from each rank, whether the exchange must go
    in pieces, the same on every rank).

    The flag rides with the counts (a rank sending over MAX_COUNT // size rows), so one collective, not two.
    """
    counts = np.asarray(counts, dtype=np.int64)
    mine = np.empty((comm.size, 2), dtype=np.int64)
    mine[:, 0] = counts
    mine[:, 1] = int(counts.sum()) > MAX_COUNT // comm.size
    theirs = np.empty_like(mine)
    with bounded("exchange_counts (Alltoall)"):
        all_arrived(comm)
        comm.Alltoall(mine, theirs)
    return np.ascontiguousarray(theirs[:, 0]), bool(theirs[:, 1].any())


def segment_starts(counts: np.ndarray) -> np.ndarray:
    """Return where each of consecutive segments of `counts` lengths starts (an all-to-all's displacements)."""
    starts = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return starts


def alltoallv(comm: Any, send: np.ndarray, counts: np.ndarray, recv_counts: np.ndarray | None = None,
              pieces: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Collective over `comm`: send `counts[r]` rows of `send` (ordered by destination) to each rank r; return
    (received rows grouped by source rank, rows received from each rank). Every rank calls it, also with nothing
    to send. Past `MAX_COUNT` rows, point-to-point pieces, with no extra copies.

    `recv_counts`, `pieces`: where every rank knows what it receives (a reply to an exchange with the same counts,
    reversed: pass that one's `exchange_counts`), no counts travel: one collective, not two.
    """
    send = np.ascontiguousarray(send)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    met = recv_counts is None or pieces is None  # the ranks meet in exchange_counts just before
    if met:
        recv_counts, pieces = exchange_counts(comm, counts)
    recv_counts = np.ascontiguousarray(recv_counts, dtype=np.int64)
    recv = np.empty((int(recv_counts.sum()),) + send.shape[1:], dtype=send.dtype)
    row = _row_type(send)
    try:
        sdispl, rdispl = segment_starts(counts), segment_starts(recv_counts)
        with bounded("alltoallv"):
            if not met:
                all_arrived(comm)
            if not pieces:
                comm.Alltoallv([send, (counts, sdispl), row], [recv, (recv_counts, rdispl), row])
            else:
                _alltoallv_pieces(comm, send, counts, sdispl, recv, recv_counts, rdispl, row)
    finally:
        row.Free()
    return recv, recv_counts


def _row_type(array: np.ndarray) -> Any:
    """A committed row datatype (the caller frees it); raw bytes for dtypes MPI has no name for."""
    from mpi4py import MPI
    from mpi4py.util import dtlib

    width = int(np.prod(array.shape[1:], dtype=np.int64)) if array.ndim > 1 else 1
    try:
        base = dtlib.from_numpy_dtype(array.dtype)
        if base.extent != array.dtype.itemsize:
            raise ValueError("padded datatype")
    except (ValueError, KeyError, TypeError):
        base, width = MPI.BYTE, width * array.dtype.itemsize
    if width > 2**31 - 1:
        raise ValueError(f"alltoallv rows must hold at most 2**31-1 elements; got {width}. HINT: reshape so "
                         "rows are narrower (rows are what travels)")
    return base.Create_contiguous(width).Commit()


def _alltoallv_pieces(comm: Any, send: np.ndarray, counts: np.ndarray, sdispl: np.ndarray, recv: np.ndarray,
                      recv_counts: np.ndarray, rdispl: np.ndarray, row: Any) -> None:
    """One tag suffices: messages of one pair match in posting order (MPI's non-overtaking rule)."""
    from mpi4py import MPI

    me, reqs = comm.rank, []
    for peer in (r for r in range(comm.size) if r != me):
        reqs += [comm.Irecv([recv[lo:hi], hi - lo, row], source=peer, tag=_ALLTOALLV_TAG)
                 for lo, hi in _pieces(int(rdispl[peer]), int(recv_counts[peer]))]
        reqs += [comm.Isend([send[lo:hi], hi - lo, row], dest=peer, tag=_ALLTOALLV_TAG)
                 for lo, hi in _pieces(int(sdispl[peer]), int(counts[peer]))]
    mine = int(counts[me])
    recv[int(rdispl[me]):int(rdispl[me]) + mine] = send[int(sdispl[me]):int(sdispl[me]) + mine]
    MPI.Request.Waitall(reqs)


def _pieces(start: int, count: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + MAX_COUNT, start + count)) for lo in range(start, start + count, MAX_COUNT)]


def _allreduce(comm: Any, values: np.ndarray | Sequence[float], op: str) -> np.ndarray:
    local = np.asarray(values, dtype=np.float64)
    out = np.empty_like(local)
    with bounded(f"allreduce_{op.lower()}"):
        all_arrived(comm)
        comm.Allreduce(local, out, op=mpi_op(op))
    return out


def allreduce_sum(comm: Any, values: np.ndarray | Sequence[float]) -> np.ndarray:
    """Collective over `comm`: element-wise sum of a small float64 vector (metrics as sums, not means)."""
    return _allreduce(comm, values, "SUM")


def allreduce_max(comm: Any, values: np.ndarray | Sequence[float]) -> np.ndarray:
    """Collective over `comm`: element-wise max of a small float64 vector (slowest rank's time, peak memory)."""
    return _allreduce(comm, values, "MAX")
