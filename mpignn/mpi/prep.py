"""Rank-0-first preparation: a first rank's failure reaches every rank; nobody hangs."""
from __future__ import annotations

import contextlib
import socket
from typing import Any, Callable, Iterator

from mpignn.errors import LaunchError, MpignnError, mark_agreed
from mpignn.mpi.collectives import sleep_until
from mpignn.mpi.topology import host_comm, mpi_op
from mpignn.mpi.watchdog import bounded, watching

__all__ = ["RootFailedError", "root_first", "run_once"]

_READY_TAG = 7101


class RootFailedError(MpignnError):
    """Rank 0 (of the job or of a host) failed while preparing; raised on every rank."""


def _finish(comm: Any, ok: bool, message: str, own: BaseException | None = None, limit: float = 0.0) -> None:
    """Per-host mode has several first ranks: every rank learns whether any failed. Their work takes each
    host its own time (a cold compile on one, a cache read on another), so the agreement may wait `limit`
    (--prep-timeout plus --collective-timeout) while every rank answers; a rank stopped meanwhile ends the job."""
    with bounded("the preparation's agreement (allreduce)", limit=limit):
        if comm.allreduce(ok, op=mpi_op("LAND")):
            return
        messages = [m for m in comm.allgather(None if ok else message) if m]
    if own is not None:
        raise mark_agreed(own)
    raise mark_agreed(RootFailedError(messages[0]))


def _group(comm: Any, per_host: bool) -> Any:
    """Collective over `comm`: each host's ranks (`per_host`) or all of `comm`, for a `with`."""
    return host_comm(comm) if per_host else contextlib.nullcontext(comm)


@contextlib.contextmanager
def root_first(comm: Any, *, per_host: bool = False, timeout: float | None = None,
               what: str = "its preparation") -> Iterator[bool]:
    """Collective over `comm`: rank 0 runs the block first, the others wait for its ready signal, then run it.

    So rank 0 does the one-time work (a download) and the rest only load. `per_host`: each host's rank 0 goes
    first (node-local disks). A first rank's failure raises RootFailedError on every rank. `timeout` bounds
    the wait for a stuck first rank. Yields True on the rank(s) that go first.
    """
    dog = watching()  # several first ranks, each its own time: the bound of the work they agree on
    limit = timeout + dog.timeout if per_host and timeout and dog is not None else 0.0
    with _group(comm, per_host) as group:
        if group.rank == 0:
            failure: BaseException | None = None
            try:
                yield True
            except BaseException as exc:
                failure = exc
            message = "" if failure is None else (
                f"rank {comm.rank} on {socket.gethostname()} failed during {what}: {type(failure).__name__}"
                + (f": {failure}" if str(failure) else ""))
            for req in [group.isend((failure is None, message), dest=r, tag=_READY_TAG) for r in range(1, group.size)]:
                req.wait()
            _finish(comm, failure is None, message, failure, limit)
        else:
            # polled instead of blocking, so a stuck rank 0 becomes a clear error
            if not sleep_until(lambda: group.Iprobe(source=0, tag=_READY_TAG), timeout, longest=0.05):
                raise LaunchError(f"waited {timeout:.0f}s for rank 0 to finish {what}; got no ready signal. "
                                  "HINT: look at rank 0's log, or raise the timeout for slow downloads.")
            ok, message = group.recv(source=0, tag=_READY_TAG)
            _finish(comm, ok, message, limit=limit)
            yield False


def run_once(comm: Any, fn: Callable[[], Any], *, per_host: bool = False, timeout: float | None = None,
             what: str = "its one-time job") -> Any:
    """Collective over `comm`: run `fn` on rank 0 only (of the job, or each host); return its picklable result
    on every rank of that group. Failures propagate as in `root_first`."""
    result = None
    with root_first(comm, per_host=per_host, timeout=timeout, what=what) as first:
        if first:
            result = fn()
    with _group(comm, per_host) as group:
        return group.bcast(result, root=0)
