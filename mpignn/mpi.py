"""MPI helpers any HPC program can use: topology, work splits, rank-0-first preparation, checked collectives,
all-to-all on numpy buffers, and `run_main` (abort the job on an uncaught exception).

Imports only the stdlib, numpy and mpi4py (never torch). `mpi4py.MPI` is imported lazily, so importing this
module does not initialise MPI.
"""
from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from mpignn import env as _env
from mpignn.errors import LaunchError, MpignnError, is_agreed, mark_agreed
from mpignn.watchdog import bounded

__all__ = [
    "Topology", "world", "topology", "whoami", "check_launcher", "chunk_bounds", "ceil_split", "steps_per_epoch",
    "pad_to_steps", "root_first", "run_once", "check_all", "alltoallv", "allreduce_sum", "allreduce_max", "run_main",
    "RootFailedError", "print0", "thread_budget", "MAX_COUNT", "exchange_counts", "rendezvous_endpoint",
    "library_version",
]

thread_budget = _env.thread_budget

# The torch-facing helpers (init_process_group, choose, apply_threads, detect_hardware) live in mpignn.dist,
# one layer up: import them from there. This module never imports mpignn.dist (tests/test_layering.py).

log = logging.getLogger(__name__)
_READY_TAG = 7101


def world() -> Any:
    """`MPI.COMM_WORLD` (initialises MPI on first use)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD


def library_version() -> str:
    """The MPI library's version string (`MPI_Get_library_version`), e.g. "MPICH Version: 4.2.0 ..."."""
    from mpi4py import MPI

    return MPI.Get_library_version()


@dataclass(frozen=True)
class Topology:
    """Where this rank sits: globally, on its host, and which host."""

    rank: int
    world_size: int
    local_rank: int
    local_size: int
    host_rank: int
    num_hosts: int
    host: str

    @property
    def is_root(self) -> bool:
        return self.rank == 0


def topology(comm: Any) -> Topology:
    """Collective over `comm`: every rank must call it, in the same order.

    Local rank and size come from a shared-memory split of `comm`, not from environment variables, so they are
    right under any launcher. Hosts are numbered by the global rank of their first rank.
    """
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        leaders = comm.allgather(comm.rank if local.rank == 0 else -1)
        leader_ranks = sorted(r for r in leaders if r >= 0)
        my_leader = local.bcast(comm.rank if local.rank == 0 else None, root=0)
        return Topology(rank=comm.rank, world_size=comm.size, local_rank=local.rank, local_size=local.size,
                        host_rank=leader_ranks.index(my_leader), num_hosts=len(leader_ranks),
                        host=socket.gethostname())
    finally:
        local.Free()


def whoami() -> Topology:
    """This process's topology: from MPI when mpi4py is installed, else from the launcher's environment.

    Under MPI this is collective over COMM_WORLD. When MPI finds one process but a launcher's variables say
    more, the wrong `mpirun` started this program; that is raised as a LaunchError.
    """
    try:
        comm = world()
    except ImportError:
        info = _env.detect()
        return Topology(info.rank, info.world_size, info.local_rank, info.local_size, info.host_rank,
                        info.num_hosts, socket.gethostname())
    check_launcher()
    return topology(comm)


def check_launcher() -> None:
    """Refuse to run when the wrong `mpirun` started this process: MPI sees one process (a singleton) while
    an MPI launcher's variables (Open MPI, PMIx, PMI) say it started more.

    Not a collective: under that fault every process is alone in its COMM_WORLD, and each raises alike.

    Raises:
        LaunchError: the wrong launcher; the message names the fix.
    """
    expected = _env.foreign_launcher_size()
    if expected > 1 and world().size == 1:
        raise mark_agreed(LaunchError(
            f"expected MPI to see the {expected} processes the launcher started; got 1 (this is launcher rank "
            f"{_env.detect().rank}, alone in its MPI world, so every process would train and prepare data as "
            "rank 0 of 1). HINT: launch with the mpirun/mpiexec of the MPI that mpi4py was built against "
            "(`python -m mpi4py --mpi-lib-version` names it)"))


def rendezvous_endpoint(comm: Any) -> tuple[str, str | None]:
    """Collective over `comm`: every rank must call it, in the same order. Rank 0's address the other hosts
    reach (MASTER_ADDR), the same on every rank, and this rank's own interface on that address's subnet (for
    GLOO_SOCKET_IFNAME; None on one host). No port: the store goes over MPI (`mpignn.mpi_store`).

    The address: a MASTER_ADDR set on rank 0;
    else on one host, what the host name resolves to; across hosts never a loopback address (a host name
    mapped to 127.0.1.1 in /etc/hosts is common), but the IPv4 address of the interface named by
    MPIGNN_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, else one of rank 0's addresses on a subnet
    every other host also has an address in (each host's first rank reports its interfaces).

    Raises:
        LaunchError: on every rank alike, when no such address exists; the message names the fix.
    """
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    leader = local.rank == 0
    local.Free()
    reports = comm.gather(_env.ipv4_interfaces() if leader and comm.rank != 0 else None, root=0)
    answer: tuple[str, str, str] = ("", "", "")
    if comm.rank == 0:
        try:
            address, network = _choose_address([r for r in reports[1:] if r is not None])
            answer = (address, network, "")
        except LaunchError as exc:
            answer = ("", "", str(exc))
    address, network, problem = comm.bcast(answer, root=0)
    if problem:
        raise mark_agreed(LaunchError(problem))
    ifname = None
    if network:  # the gloo transport binds what the host name resolves to unless told: tell it the same subnet
        own = [i for i in _env.ipv4_interfaces() if ipaddress.ip_address(i.address) in ipaddress.ip_network(network)]
        ifname = own[0].name if own else None
    return address, ifname


def _choose_address(others: list[list[_env.Interface]]) -> tuple[str, str]:
    """Rank 0's side of `rendezvous_endpoint`: (address, its subnet or "" on one host or a MASTER_ADDR set by
    the user); `others` holds the interfaces of each other host."""
    user = _env.user_master_addr()
    if user:
        return user, ""
    if not others:
        return _env.host_address(), ""
    mine = _env.ipv4_interfaces()
    hint = ("HINT: set MPIGNN_SOCKET_IFNAME to the interface the hosts reach each other on (see `ip -4 addr`), "
            "or MASTER_ADDR to rank 0's address on it")
    named = _env.socket_ifname()
    if named:
        var, name = named
        match = [i for i in mine if i.name == name] or [i for i in mine if i.name.startswith(name)]
        if not match or match[0].is_loopback:
            raise LaunchError(f"{var}={name} should name a non-loopback IPv4 interface of rank 0's host "
                              f"{socket.gethostname()}; got interfaces {_describe_ifaces(mine)}. {hint}")
        return match[0].address, str(match[0].network)
    resolved = _env.host_address()
    shared = _env.pick_shared_address(sorted(mine, key=lambda i: i.address != resolved), others)
    if shared is None:
        raise LaunchError(f"expected an IPv4 address of rank 0's host {socket.gethostname()} on a subnet all "
                          f"{len(others) + 1} hosts share (its name resolves to {resolved}); got rank 0: "
                          f"{_describe_ifaces(mine)}, other hosts: "
                          f"{'; '.join(_describe_ifaces(o) for o in others)}. {hint}")
    if resolved != shared.address:
        log.info("rendezvous on %s (%s), not %s that the host name resolves to", shared.address, shared.name,
                 resolved)
    return shared.address, str(shared.network)


def _describe_ifaces(ifaces: list[_env.Interface]) -> str:
    return ", ".join(f"{i.name} {i.address}/{i.prefixlen}" for i in ifaces) or "none"


def chunk_bounds(n: int, size: int, rank: int) -> tuple[int, int]:
    """[start, stop) of `rank`'s chunk when n items are cut into exactly `size` chunks by ceiling division.

    The first `n % size` chunks hold one item more than the rest; chunk sizes differ by at most one, and with
    fewer items than ranks the trailing chunks are empty.
    """
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"need 0 <= rank < size; got rank={rank}, size={size}")
    base, extra = divmod(int(n), size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def ceil_split(items: Sequence | np.ndarray | int, size: int, rank: int) -> Any:
    """`rank`'s share of `items` (or of `range(items)` for an int); see `chunk_bounds`."""
    if isinstance(items, (int, np.integer)):
        return range(*chunk_bounds(int(items), size, rank))
    start, stop = chunk_bounds(len(items), size, rank)
    return items[start:stop]


def steps_per_epoch(comm: Any, num_local: int, batch_size: int, drop_last: bool = False) -> int:
    """Collective over `comm`: the number of steps every rank runs, so DDP never waits on a rank that stopped.

    Policy: without drop_last the rank with the most items sets the count (ceil(n / batch_size)) and the
    others cut their items into that many smaller batches (`pad_to_steps`); with drop_last the rank with the
    fewest items sets it (floor), and the others leave their surplus out this epoch.
    """
    steps = num_local // batch_size if drop_last else -(-num_local // batch_size)
    with bounded("steps_per_epoch (allreduce)"):
        return int(comm.allreduce(steps, op=_op("MIN" if drop_last else "MAX")))


def pad_to_steps(indices: np.ndarray, steps: int, batch_size: int, drop_last: bool = False) -> list[np.ndarray]:
    """Cut `indices` into exactly `steps` batches of at most `batch_size` items.

    With at least `steps` items they are spread evenly (sizes differ by at most one; each item once). With
    fewer, items wrap around so no batch is empty. With no items at all the batches are empty and the caller
    still takes part in every collective. drop_last takes `steps` full batches and leaves the rest out.
    """
    n = len(indices)
    if drop_last:
        return [indices[i * batch_size:(i + 1) * batch_size] for i in range(steps)]
    if n == 0:
        return [indices[:0] for _ in range(steps)]
    if n >= steps:
        if -(-n // steps) > batch_size:
            raise ValueError(f"{n} items do not fit {steps} batches of {batch_size}; use steps_per_epoch()")
        bounds = [chunk_bounds(n, steps, i) for i in range(steps)]
        return [indices[a:b] for a, b in bounds]
    return [indices[i % n:i % n + 1] for i in range(steps)]


def _op(name: str) -> Any:
    from mpi4py import MPI

    return getattr(MPI, name)


class RootFailedError(MpignnError):
    """Rank 0 (of the job or of a host) failed while preparing; raised on every rank."""


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _send_status(group: Any, status: tuple[bool, str]) -> None:
    reqs = [group.isend(status, dest=r, tag=_READY_TAG) for r in range(1, group.size)]
    for req in reqs:
        req.wait()


def _wait_status(group: Any, timeout: float | None, what: str) -> tuple[bool, str]:
    """Poll for rank 0's status instead of blocking, so a stuck rank 0 becomes a clear error."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.001
    while not group.Iprobe(source=0, tag=_READY_TAG):
        if deadline is not None and time.monotonic() > deadline:
            raise LaunchError(f"waited {timeout:.0f}s for rank 0 to finish {what}; got no ready signal. "
                              "HINT: look at rank 0's log, or raise the timeout for slow downloads.")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    return group.recv(source=0, tag=_READY_TAG)


def _finish(comm: Any, ok: bool, message: str, own: BaseException | None = None) -> None:
    """Every rank learns whether any first rank failed (per-host mode has several), and raises alike."""
    if comm.allreduce(ok, op=_op("LAND")):
        return
    messages = [m for m in comm.allgather(None if ok else message) if m]
    if own is not None:
        raise mark_agreed(own)
    raise mark_agreed(RootFailedError(messages[0]))


def _group(comm: Any, per_host: bool) -> Any:
    from mpi4py import MPI

    return comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank) if per_host else comm


@contextlib.contextmanager
def root_first(comm: Any, *, per_host: bool = False, timeout: float | None = None,
               what: str = "its preparation") -> Iterator[bool]:
    """Collective over `comm`: rank 0 runs the block first, the others wait for its ready signal, then run it.

    The usual body downloads or preprocesses when its files are missing and loads them otherwise, so rank 0
    does the one-time work and the rest only load. With `per_host`, rank 0 of each host goes first (for
    node-local disks). A failure on a first rank reaches every rank, which raises RootFailedError naming the
    rank, host and cause; nobody hangs. `timeout` (seconds) bounds the wait for a stuck first rank.

    Yields:
        True on the rank(s) that go first.
    """
    group = _group(comm, per_host)
    try:
        if group.rank == 0:
            failure: BaseException | None = None
            try:
                yield True
            except BaseException as exc:
                failure = exc
            message = "" if failure is None else (
                f"rank {comm.rank} on {socket.gethostname()} failed during {what}: {_describe(failure)}")
            _send_status(group, (failure is None, message))
            _finish(comm, failure is None, message, failure)
        else:
            ok, message = _wait_status(group, timeout, what)
            _finish(comm, ok, message)
            yield False
    finally:
        if per_host:
            group.Free()


def run_once(comm: Any, fn: Callable[[], Any], *, per_host: bool = False, timeout: float | None = None,
             what: str = "its one-time job") -> Any:
    """Collective over `comm`: run `fn` on rank 0 only (of the job, or of each host) and return its result
    (which must be picklable) on every rank of that group. Failures propagate as in `root_first`."""
    result = None
    with root_first(comm, per_host=per_host, timeout=timeout, what=what) as first:
        if first:
            result = fn()
    group = _group(comm, per_host)
    try:
        return group.bcast(result, root=0)
    finally:
        if per_host:
            group.Free()


def check_all(comm: Any, ok: bool, message: str, error: type[MpignnError] = MpignnError) -> None:
    """Collective over `comm`: raise the same `error` on every rank if `ok` is False on any rank.

    The message of the lowest failing rank is used, prefixed with that rank, so no rank is left waiting in
    the next collective while another has already raised.
    """
    with bounded("check_all (allreduce)"):
        if comm.allreduce(bool(ok), op=_op("LAND")):
            return
        failed = [(r, m) for r, m in enumerate(comm.allgather(None if ok else message)) if m is not None]
    rank, first = failed[0]
    prefix = f"rank {rank}: " if comm.size > 1 else ""
    raise mark_agreed(error(prefix + first))


# The most rows one MPI call moves: MPI's counts and displacements are C ints. Exchanges whose rows (in a
# row datatype, so 2-D arrays count rows, not elements) exceed it on any rank go out in pieces of at most this
# many rows. Tests lower it to exercise the pieces on small arrays.
MAX_COUNT = 2**31 - 1
_ALLTOALLV_TAG = 7102


def exchange_counts(comm: Any, counts: np.ndarray) -> tuple[np.ndarray, bool]:
    """Collective over `comm`, one Alltoall: (rows this rank receives from each rank, whether the exchange of
    `counts` rows must go in pieces; the same answer on every rank).

    With each count goes a flag: this rank sends more than MAX_COUNT // size rows in all. No rank sends or
    receives more than MAX_COUNT rows unless some rank raised it (a rank receiving more gets more than
    MAX_COUNT // size from one sender), and every rank sees every flag: one collective, not two.
    """
    counts = np.asarray(counts, dtype=np.int64)
    mine = np.empty((comm.size, 2), dtype=np.int64)
    mine[:, 0] = counts
    mine[:, 1] = int(counts.sum()) > MAX_COUNT // comm.size
    theirs = np.empty_like(mine)
    with bounded("exchange_counts (Alltoall)"):
        comm.Alltoall(mine, theirs)
    return np.ascontiguousarray(theirs[:, 0]), bool(theirs[:, 1].any())


def alltoallv(comm: Any, send: np.ndarray, counts: np.ndarray, recv_counts: np.ndarray | None = None,
              pieces: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Collective over `comm`: send `counts[r]` rows of `send` (grouped by destination, in rank order) to each
    rank r; every rank must call it, also with nothing to send.

    Rows travel as one MPI datatype each, so an exchange needs pieces only when some rank sends or receives
    more than `MAX_COUNT` rows; then every rank (they agree on it) sends each peer its rows in point-to-point
    messages of at most `MAX_COUNT` rows, straight from and into the arrays (no extra copies).

    Args:
        send: array of rows (1-D, or N-D with fixed trailing dimensions), ordered by destination rank.
        counts: rows for each destination, length `comm.size`.
        recv_counts, pieces: when every rank knows what it receives (a reply to an exchange with the same
            counts, reversed: pass that one's `exchange_counts`), no counts travel: one collective, not two.
    Returns:
        (received rows grouped by source rank, rows received from each rank).
    """
    send = np.ascontiguousarray(send)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if recv_counts is None or pieces is None:
        recv_counts, pieces = exchange_counts(comm, counts)
    recv_counts = np.ascontiguousarray(recv_counts, dtype=np.int64)
    recv = np.empty((int(recv_counts.sum()),) + send.shape[1:], dtype=send.dtype)
    row = _row_type(send)
    try:
        sdispl = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        rdispl = np.concatenate([[0], np.cumsum(recv_counts)[:-1]]).astype(np.int64)
        with bounded("alltoallv"):
            if not pieces:
                comm.Alltoallv([send, (counts, sdispl), row], [recv, (recv_counts, rdispl), row])
            else:
                _alltoallv_pieces(comm, send, counts, sdispl, recv, recv_counts, rdispl, row)
    finally:
        row.Free()
    return recv, recv_counts


def _row_type(array: np.ndarray) -> Any:
    """A committed MPI datatype for one row of `array` (the caller frees it): the element type from mpi4py's
    public NumPy mapping, else raw bytes (dtypes MPI has no name for, e.g. structured ones)."""
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
    """Every peer pair exchanges its rows in messages of at most MAX_COUNT rows. Messages of one pair match in
    posting order (MPI's non-overtaking rule), so one tag suffices; all receives are posted before any wait."""
    from mpi4py import MPI

    me, reqs = comm.rank, []
    for src in range(comm.size):
        if src != me:
            for lo, hi in _pieces(int(rdispl[src]), int(recv_counts[src])):
                reqs.append(comm.Irecv([recv[lo:hi], hi - lo, row], source=src, tag=_ALLTOALLV_TAG))
    for dest in range(comm.size):
        if dest != me:
            for lo, hi in _pieces(int(sdispl[dest]), int(counts[dest])):
                reqs.append(comm.Isend([send[lo:hi], hi - lo, row], dest=dest, tag=_ALLTOALLV_TAG))
    mine = int(counts[me])
    recv[int(rdispl[me]):int(rdispl[me]) + mine] = send[int(sdispl[me]):int(sdispl[me]) + mine]
    MPI.Request.Waitall(reqs)


def _pieces(start: int, count: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + MAX_COUNT, start + count)) for lo in range(start, start + count, MAX_COUNT)]


def allreduce_sum(comm: Any, values: np.ndarray | Sequence[float]) -> np.ndarray:
    """Collective over `comm`: element-wise sum of a small float64 vector (metrics as sums, not means)."""
    local = np.asarray(values, dtype=np.float64)
    out = np.empty_like(local)
    with bounded("allreduce_sum"):
        comm.Allreduce(local, out, op=_op("SUM"))
    return out


def allreduce_max(comm: Any, values: np.ndarray | Sequence[float]) -> np.ndarray:
    """Collective over `comm`: element-wise max of a small float64 vector (slowest rank's time, peak memory)."""
    local = np.asarray(values, dtype=np.float64)
    out = np.empty_like(local)
    with bounded("allreduce_max"):
        comm.Allreduce(local, out, op=_op("MAX"))
    return out


def print0(*args: Any, rank: int | None = None, **kwargs: Any) -> None:
    """print() on global rank 0 only (rank from MPI if not given); flushes so batch logs stay in order."""
    if rank is None:
        rank = world().rank
    if rank == 0:
        print(*args, flush=True, **kwargs)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def run_main(main: Callable[..., int | None], *args: Any, **kwargs: Any) -> int:
    """Run `main` and turn any failure into a clean, job-wide exit.

    - MpignnError raised on every rank alike (after a checked collective): each rank prints one line and
      exits 1, so every rank states the problem.
    - Any other exception: the rank prints its traceback and a summary (rank, host, pid, exception) and calls
      `COMM_WORLD.Abort(1)`, which ends every rank instead of leaving them blocked in a collective.
    Returns main's exit code (and exits with it when run as a program).
    """
    rank, host = _rank_for_messages(), socket.gethostname()
    try:
        code = main(*args, **kwargs)
        return 0 if code is None else int(code)
    except SystemExit:
        raise
    except BaseException as exc:
        agreed = is_agreed(exc)
        if isinstance(exc, MpignnError):
            print(f"mpignn: error: [rank {rank}] {_one_line(exc)}", file=sys.stderr, flush=True)
        else:
            traceback.print_exc()
            print(f"mpignn: root cause: rank {rank} on {host} (pid {os.getpid()}) raised "
                  f"{type(exc).__name__}: {_one_line(exc)}", file=sys.stderr, flush=True)
        if agreed or not _mpi_running() or _world_size() == 1:
            return 1
        _abort(1)
        return 1


def _mpi_running() -> bool:
    mod = sys.modules.get("mpi4py.MPI")
    return mod is not None and mod.Is_initialized() and not mod.Is_finalized()


def _world_size() -> int:
    return sys.modules["mpi4py.MPI"].COMM_WORLD.size


def _rank_for_messages() -> int:
    if _mpi_running():
        return sys.modules["mpi4py.MPI"].COMM_WORLD.rank
    return _env.detect().rank


def _abort(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    if _mpi_running() and _world_size() > 1:
        # Abort makes the launcher kill every process at once; give it a moment to forward what this rank
        # just printed, or the traceback and the root-cause line can be lost.
        time.sleep(0.5)
        sys.modules["mpi4py.MPI"].COMM_WORLD.Abort(code)
    os._exit(code)

