"""A torch.distributed Store whose keys travel over MPI, so the rendezvous opens no TCP port at all; and the
TCPStore for a hand-set MASTER_PORT.
"""
from __future__ import annotations

import atexit
import datetime
import threading
import time
from typing import Any

import torch

from mpignn import env as _env
from mpignn.errors import LaunchError, mark_agreed
from mpignn.mpi.collectives import sleep_until

__all__ = ["MPIStore", "listening_tcp_store"]

_REQUEST, _REPLY = 0x6D70, 0x6D71  # tags on the store's own duplicate communicator


def _waits_for(op: str, args: tuple) -> list[str]:
    """The keys a get or wait needs before it can be answered (a wait's and a check's keys travel as a list)."""
    return [args[0]] if op == "get" else list(args[0]) if op == "wait" else []


def _apply(keys: Any, op: str, args: tuple) -> Any:
    """Answer one request from rank 0's table, a HashStore (so TCPStore's semantics, compare_set's included)."""
    if op == "wait":  # its keys were there (rank 0's _call waited, _serve held it): a HashStore wait would block
        return None   # again, up to HashStore's own timeout, if a delete_key was served in between
    return getattr(keys, op)(*args)


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class MPIStore(torch.distributed.Store):
    """Collective over `comm` to create: a key-value store for `init_process_group(store=...)` over MPI.

    Rank 0 holds the keys; a daemon thread there polls for requests, sleeping so it costs no core. Nothing
    listens on a socket, so no neighbour can read, set or delete a key. Needs MPI_THREAD_MULTIPLE. A get or
    wait raises `torch.distributed.DistStoreError` after `timeout`.
    """

    def __init__(self, comm: Any, timeout: datetime.timedelta) -> None:
        super().__init__()
        self._comm = comm.Dup()
        self._wait_s = timeout.total_seconds()
        self._lock = threading.Lock()  # one request in flight per rank (torch may call from several threads)
        self._seq = 0
        self._stop = threading.Event()
        self._closed = False
        self._gone: set[int] = set()  # rank 0: the ranks that said goodbye
        self._keys = torch.distributed.HashStore() if self._comm.rank == 0 else None  # rank 0 holds the keys
        if self._keys is not None:
            self._keys.set_timeout(timeout)
        self._thread: threading.Thread | None = None
        if self._keys is not None and self._comm.size > 1:
            self._thread = threading.Thread(target=self._serve, name="mpignn-store", daemon=True)
            self._thread.start()
        atexit.register(self.close)  # before mpi4py's finaliser (atexit runs last-registered first)

    # -- torch.distributed.Store -------------------------------------------------------------------------------
    def set(self, key: str, value: Any) -> None:
        self._call("set", (key, _as_bytes(value)))

    def get(self, key: str) -> bytes:
        return self._call("get", (key,))

    def add(self, key: str, amount: int) -> int:
        return self._call("add", (key, int(amount)))

    def compare_set(self, key: str, expected: Any, desired: Any) -> bytes:
        return self._call("compare_set", (key, _as_bytes(expected), _as_bytes(desired)))

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        self._call("wait", (list(keys),), timeout.total_seconds() if timeout is not None else None)

    def check(self, keys: list[str]) -> bool:
        return self._call("check", (list(keys),))

    def delete_key(self, key: str) -> bool:
        return self._call("delete_key", (key,))

    def num_keys(self) -> int:
        return self._call("num_keys", ())

    def clone(self) -> MPIStore:
        """Return self: calls are serialised, so one object serves every `new_group`."""
        return self

    deleteKey = delete_key  # noqa: N815  the C++ trampoline looks these two up by their C++ names
    getNumKeys = num_keys  # noqa: N815

    def close(self) -> None:
        """Say goodbye (also at exit; idempotent): rank 0 serves until every rank has, or the timeout.

        So a rank that leaves first (an error right after `init_process_group`) strands none still waiting."""
        if self._closed:
            return
        self._closed = True
        if self._keys is None:
            with self._lock:
                self._comm.send((0, "bye", ()), dest=0, tag=_REQUEST)
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._wait_s + 5)
            self._thread = None

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _call(self, op: str, args: tuple, wait_s: float | None = None) -> Any:
        wait_s = self._wait_s if wait_s is None or wait_s <= 0 else wait_s
        if self._keys is None:
            with self._lock:
                return self._remote(op, args, wait_s)
        needed = _waits_for(op, args)
        if needed:
            try:
                self._keys.wait(needed, datetime.timedelta(seconds=wait_s))
            except torch.distributed.DistStoreError:
                raise self._timeout(op, args, wait_s) from None
        return _apply(self._keys, op, args)

    def _remote(self, op: str, args: tuple, wait_s: float) -> Any:
        self._seq += 1
        self._comm.send((self._seq, op, args), dest=0, tag=_REQUEST)
        deadline = time.monotonic() + wait_s
        while True:
            if not sleep_until(lambda: self._comm.iprobe(source=0, tag=_REPLY), deadline - time.monotonic(), 5e-3):
                raise self._timeout(op, args, wait_s)
            seq, answer = self._comm.recv(source=0, tag=_REPLY)
            if seq != self._seq:  # a late answer to a request that already timed out
                continue
            if isinstance(answer, Exception):
                raise answer
            return answer

    def _serve(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        pending: list[tuple[int, int, str, tuple]] = []
        pause, last_busy, deadline = 0.0, time.monotonic(), None
        others = self._comm.size - 1
        while True:
            if self._stop.is_set():  # closing: serve until every rank said goodbye, or the timeout
                deadline = deadline or time.monotonic() + self._wait_s
                if len(self._gone) >= others or time.monotonic() > deadline:
                    return
            busy = False
            while self._comm.iprobe(source=MPI.ANY_SOURCE, tag=_REQUEST, status=status):
                source = status.Get_source()
                seq, op, args = self._comm.recv(source=source, tag=_REQUEST)
                if op == "bye":
                    self._gone.add(source)
                else:
                    pending.append((source, seq, op, args))
                busy = True
            waiting = []
            for source, seq, op, args in pending:
                try:
                    if not self._keys.check(_waits_for(op, args)):
                        waiting.append((source, seq, op, args))
                        continue
                    answer = _apply(self._keys, op, args)
                except Exception as exc:  # a malformed request answers with the error
                    answer = exc
                self._comm.send((seq, answer), dest=source, tag=_REPLY)
                busy = True
            pending = waiting
            if busy:
                last_busy = time.monotonic()
            cap = 5e-3 if time.monotonic() - last_busy < 1.0 else 5e-2  # a lazy NCCL init may come much later
            pause = 0.0 if busy else min(pause * 2 or 1e-5, cap)
            time.sleep(pause)

    def _timeout(self, op: str, args: tuple, wait_s: float) -> Exception:
        keys = list(args[0]) if op in ("wait", "check") else list(args[:1] if op == "get" else args)
        return torch.distributed.DistStoreError(
            f"expected the key(s) {keys} of the MPI rendezvous store within "
            f"{wait_s:.0f} s; got none (rank {self._comm.rank}). HINT: a rank did not reach "
            "init_process_group: look for an earlier error on another rank")


def listening_tcp_store(comm: Any, address: str, port: str, world_size: int,
                        timeout: datetime.timedelta) -> torch.distributed.TCPStore:
    """Collective over `comm`: return a TCPStore on exactly `address:port` (a hand-set MASTER_ADDR/MASTER_PORT).

    Rank 0 hands its listening socket to the store, so no other process can take the port in between. Raises
    LaunchError on every rank alike when rank 0 cannot listen there.
    """
    sock, problem = None, ""
    if comm.rank == 0:
        try:
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise OSError(f"MASTER_PORT={port!r} is not a port number (1-65535)")
            sock = _env.listen_socket(address, int(port))
        except OSError as exc:
            problem = (f"expected to listen on MASTER_ADDR:MASTER_PORT {address}:{port} on rank 0's host; got "
                       f"{exc.strerror or exc}. HINT: unset MASTER_PORT (mpignn then needs no port), or "
                       "choose a free port and an address of rank 0's host")
    problem = comm.bcast(problem, root=0)
    if problem:
        raise mark_agreed(LaunchError(problem))
    if sock is None:
        return torch.distributed.TCPStore(address, int(port), world_size, False, timeout)
    # detach(): the store's event loop owns the fd from here on (and closes it); Python must not.
    return torch.distributed.TCPStore(address, int(port), world_size, True, timeout, wait_for_workers=False,
                                      master_listen_fd=sock.detach())
