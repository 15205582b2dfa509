"""Bounded waits: `bounded` marks which collective each thread is in, and a watchdog thread ends the job when
one waits past the bound, naming the ranks that stopped answering or are in another collective.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterator

from mpignn.mpi.run import abort_job
from mpignn.mpi.whereabouts import Spots, verdict

__all__ = ["Watchdog", "bounded", "watch", "watching"]

_PING, _PONG, _ASK, _TELL = 7201, 7202, 7203, 7204


class _Slot:
    """One thread's collective ("": none), since when (0.0: none), and its marks, outermost first (`path`)."""

    __slots__ = ("what", "since", "thread", "limit", "path", "ident")

    def __init__(self, thread: threading.Thread) -> None:
        self.what, self.since, self.thread, self.limit = "", 0.0, thread.name, 0.0
        self.path: tuple[str, ...] = ()
        self.ident = thread.ident


_local = threading.local()
_slots: list[_Slot] = []
_slots_lock = threading.Lock()
_active: "Watchdog | None" = None


def _snapshot() -> list[_Slot]:
    with _slots_lock:
        return list(_slots)


def _slot() -> _Slot:
    slot = getattr(_local, "slot", None)
    if slot is None:
        slot = _local.slot = _Slot(threading.current_thread())
        with _slots_lock:
            _slots.append(slot)
    return slot


@contextlib.contextmanager
def _marked(slot: _Slot, what: str, limit: float) -> Iterator[None]:
    """Nested marks restart the clock (each collective is bounded on its own) and restore the outer on exit."""
    outer, outer_limit = slot.what, slot.limit
    slot.since = time.monotonic()
    slot.what, slot.limit = what, limit
    slot.path += (what,)
    try:
        yield
    finally:
        slot.what, slot.limit = outer, outer_limit
        slot.since = time.monotonic() if outer else 0.0
        slot.path = slot.path[:-1]


_UNWATCHED = contextlib.nullcontext()


def bounded(what: str, limit: float = 0.0) -> Any:
    """Mark the block as the collective `what` on this thread (cheap; a no-op without a Watchdog). Not collective.

    `limit`: seconds this block may wait (0: the Watchdog's timeout), e.g. up to --prep-timeout for rank 0's
    preparation. A collective marked inside it has its own bound.
    """
    if _active is None:
        return _UNWATCHED
    return _marked(_slot(), what, limit)


def watching() -> "Watchdog | None":
    """Return the running Watchdog of this process, if any."""
    return _active


def watch(comm: Any, timeout: float) -> "Watchdog":
    """Collective over `comm`: start (or keep, when it is the same) the process's Watchdog over `comm`."""
    dog = _active
    if dog is not None and dog.timeout == float(timeout) and dog.parent == comm:
        return dog
    if dog is not None:
        dog.stop()
    return Watchdog(comm, timeout).start()


def _grace(timeout: float) -> float:
    return min(10.0, max(3.0, timeout / 4))


def _tick(timeout: float) -> float:
    return min(1.0, max(0.05, timeout / 20))


class Watchdog:
    """A daemon thread that ends the job (MPI Abort) when a thread of this rank waits in one collective past
    `timeout`, naming the ranks that do not answer its pings within `grace`.

    A stopped process answers nothing; a busy live rank answers from this thread (torch and MPI release the
    GIL). Without MPI_THREAD_MULTIPLE it cannot ping, and ends the job without the names. At `early` (a quarter
    of the bound, at most 30 s) it asks where every rank is: ranks outside the collective are named, and if
    each waits in another collective (a `dist.barrier()` while rank 0 evaluates alone) the job ends then.
    """

    @staticmethod
    def reported_within(timeout: float) -> float:
        """Return when this watchdog has ended the job, with a margin: torch's timeout is set past it, so the
        message naming a stopped rank comes first, not gloo's "Timed out waiting"."""
        return timeout + _tick(timeout) + _grace(timeout) + 5.0

    def __init__(self, comm: Any, timeout: float, *, grace: float | None = None, tick: float | None = None,
                 on_expiry: Callable[[str], None] | None = None) -> None:
        """Collective over `comm`: every rank must call it, in the same order. `timeout` bounds one collective on
        any thread of this rank; `grace` (the wait for the others' replies once it expired) defaults to 3 to 10 s,
        `tick` (seconds between checks) to timeout / 20, between 0.05 and 1; `on_expiry` (tests) gets the message
        instead of printing it and aborting."""
        from mpi4py import MPI

        if not timeout > 0:
            raise ValueError(f"the collective timeout must be positive seconds; got {timeout}")
        self.timeout = float(timeout)
        self.grace = float(grace) if grace is not None else _grace(self.timeout)
        self.tick = float(tick) if tick is not None else _tick(self.timeout)
        self.parent, self.comm = comm, comm.Dup()
        self.rank, self.size = self.comm.rank, self.comm.size
        self.peers = [r for r in range(self.size) if r != self.rank]
        self.where = self.comm.allgather((socket.gethostname(), os.getpid()))
        self.can_ping = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self.on_expiry = on_expiry
        self.early = max(3 * self.tick, min(30.0, self.timeout / 4))
        self.spots, self._threads = Spots(), {}
        self._asking: dict[str, Any] | None = None  # the whereabouts asked of every rank, and their answers
        self._asked: dict[float, float] = {}  # collective (by start time) -> when its ranks were last asked
        self.absent, self._absent_since = "", 0.0  # the ranks found outside a collective, in words; its start
        self._warned = 0.0  # the start of the collective last warned about
        self._sends: list[Any] = []
        self._heard: dict[int, float] = {}  # rank -> when it last answered, during a long wait
        self._pinged = 0.0
        self._round, self._first_round = 0, 0  # pings are numbered; a pong echoes its ping's number
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mpignn-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        """Start watching every collective marked with `bounded` in this process; return self."""
        global _active
        _active = self
        atexit.register(self.stop)  # before mpi4py finalises MPI: the thread must not call into it then
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching and join the thread (not collective)."""
        global _active
        if _active is self:
            _active = None
        self._halt.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.tick + self.grace + 5)
        atexit.unregister(self.stop)

    def _run(self) -> None:
        while not self._halt.wait(self.tick):
            problem = ""
            if self.can_ping and self.size > 1:
                self._threads = {slot.ident: slot for slot in _snapshot()}
                self.spots.sample(self._threads)  # how long each thread has been where it is
                self._answer()
                problem = self._subset()
            late = None if problem else (self._late() or self._lost_in_long_wait())
            if (problem or late is not None) and not self._halt.is_set():
                self._end(problem) if problem else self._expire(*late)
                return

    def _lost_in_long_wait(self) -> tuple[str, str, float, float, list[int]] | None:
        """A wait allowed past `timeout` lasts only while every rank answers pings: one silent for `timeout`
        (a cut link, a dead host) ends the job at once. C code holding the GIL that long reads as silent
        (docs/node-local.md, "A link that fails")."""
        if not self.can_ping or self.size == 1:
            return None
        now = time.monotonic()
        waits = [(slot.what, slot.thread, now - slot.since, slot.limit) for slot in _snapshot()
                 if slot.since and slot.limit > self.timeout and now - slot.since > self.timeout]
        if not waits:
            self._heard.clear()
            return None
        if not self._heard:  # the check begins: every rank counts as heard now
            self._heard = dict.fromkeys(self.peers, now)
            self._pinged, self._first_round = 0.0, self._round + 1
        if now - self._pinged >= self.timeout / 4:
            self._ping(self._heard)
            self._pinged = now
        self._heard.update(dict.fromkeys(self._pongs(self._first_round), time.monotonic()))
        silent = [r for r, t in self._heard.items() if now - t > self.timeout]
        return (*waits[0], silent) if silent else None

    def _send(self, ranks: Any, tag: int, data: bytes) -> None:
        from mpi4py import MPI

        self._sends += [self.comm.Isend([data, MPI.BYTE], dest=r, tag=tag) for r in ranks]

    def _ping(self, ranks: Any, tag: int = _PING) -> int:
        """Send `tag` to `ranks` with the next round's number, which the reply echoes; return the number."""
        self._round += 1
        self._send(ranks, tag, self._round.to_bytes(8, "little"))
        return self._round

    def _pongs(self, first_round: int) -> list[int]:
        """Receive every pong waiting; return the ranks that answered a ping of `first_round` or later. An
        older pong, late from an earlier wait, would vouch for a rank stopped since."""
        return [r for r, data in self._drain(_PONG) if int.from_bytes(data, "little") >= first_round]

    def _drain(self, tag: int) -> list[tuple[int, bytes]]:
        """Return (source, contents) of every message with `tag` waiting."""
        from mpi4py import MPI

        status, got = MPI.Status(), []
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=tag, status=status):
            source, buf = status.Get_source(), bytearray(status.Get_count(MPI.BYTE))
            self.comm.Recv([buf, MPI.BYTE], source=source, tag=tag)
            got.append((source, bytes(buf)))
        return got

    def _late(self) -> tuple[str, str, float, float] | None:
        now = time.monotonic()
        for slot in _snapshot():
            since, limit, what = slot.since, slot.limit or self.timeout, slot.what
            if since and now - since > limit and slot.since == since:  # `what` is that collective, not a next one
                return what, slot.thread, now - since, limit
        return None

    def _answer(self) -> None:
        for source, data in self._drain(_PING):
            self._send([source], _PONG, data)
        asked = self._drain(_ASK)
        if asked:
            report = self.spots.report(self._threads)
            for source, data in asked:
                tell = {"round": int.from_bytes(data, "little"), "spots": report}
                self._send([source], _TELL, json.dumps(tell).encode())
        self._sends = [r for r in self._sends if not r.Test()]

    def _subset(self) -> str:
        """Ask every rank where it is at `early`; return the job-ending message, if any (else warn once).

        A rank that does not answer is left to the bound's liveness check."""
        now = time.monotonic()
        slots = _snapshot()
        asking = self._asking
        if asking is None:
            running = {slot.since for slot in slots}
            self._asked = {k: v for k, v in self._asked.items() if k in running}
            for slot in slots:
                since = slot.since  # asked at `early`, then every `early` until it ends (or the bound)
                last = max(since, self._asked.get(since, 0.0))
                if since and slot.path and not slot.limit and now - last > self.early:
                    self._asked[since] = now
                    self._asking = {"slot": slot, "since": since, "path": list(slot.path), "replies": {},
                                    "deadline": now + self.grace, "round": self._ping(self.peers, _ASK)}
                    break
            return ""
        for source, data in self._drain(_TELL):
            tell = json.loads(data.decode())
            if tell["round"] == asking["round"]:  # not a late answer to an earlier question
                asking["replies"][source] = tell["spots"]
        if len(asking["replies"]) < self.size - 1 and now < asking["deadline"]:
            return ""
        self._asking = None
        slot, path = asking["slot"], asking["path"]
        if len(asking["replies"]) < self.size - 1 or slot.since != asking["since"]:
            return ""  # a rank is silent (the bound names it), or the collective ended meanwhile
        host, pid = self.where[self.rank]
        here = f"thread {slot.thread}, pid {pid} on {host}, waiting {now - asking['since']:.0f}s"
        problem, absent = verdict(self.rank, path, here, asking["replies"], self.early / 2, self.timeout)
        if absent:
            self.absent, self._absent_since = absent, asking["since"]
        if problem.startswith("mpignn: warning:"):
            if self._warned != asking["since"]:  # once a collective
                self._warned = asking["since"]
                print(problem, file=sys.stderr, flush=True)
            return ""
        return problem

    def silent_ranks(self) -> list[int]:
        """Ping every other rank; return those whose watchdog does not answer within `grace` seconds."""
        this_round = self._ping(self.peers)
        deadline = time.monotonic() + self.grace
        heard: set[int] = set()
        while len(heard) < len(self.peers) and time.monotonic() < deadline:
            self._answer()  # others may be asking at the same moment
            heard.update(self._pongs(this_round))
            time.sleep(0.02)
        return [r for r in self.peers if r not in heard]

    def _expire(self, what: str, thread: str, waited: float, limit: float, silent: list[int] | None = None) -> None:
        host, pid = self.where[self.rank]
        bound = (f"--collective-timeout {limit:g}s" if limit == self.timeout else
                 f"{limit:g}s (--prep-timeout plus --collective-timeout)")
        head = (f"[rank {self.rank}] expected every collective to finish within {bound}; got {waited:.0f}s in "
                f"{what} (thread {thread}, rank {self.rank} pid {pid} on {host})")
        if silent:  # a long wait, cut short: those ranks stopped answering
            head = (f"[rank {self.rank}] expected every rank to answer within --collective-timeout "
                    f"{self.timeout:g}s while waiting in {what} (thread {thread}, rank {self.rank} pid {pid} on "
                    f"{host}, {waited:.0f}s so far)")
        if not self.can_ping:
            tail = ("; which rank stopped is unknown (MPI is not thread-multiple here). HINT: look for a stopped "
                    "or hung rank; raise --collective-timeout if a collective can take that long")
        else:
            silent = silent or self.silent_ranks()
            if silent:
                names = ", ".join(f"rank {r} (pid {self.where[r][1]} on {self.where[r][0]})" for r in silent)
                tail = (f"; {names} stopped answering (no reply in {self.grace:g}s: stopped, hung in the kernel "
                        "or gone). Ending the job. HINT: look at that host (`ps -o stat,pid` shows T for stopped, "
                        "D for stuck I/O); raise --collective-timeout if a collective can take that long")
            else:
                tail = ("; every rank answers, so they wait in different collectives or one is slow. Ending the "
                        "job. HINT: raise --collective-timeout if a collective can take that long")
        if self.absent and any(slot.since == self._absent_since for slot in list(_slots)):
            tail += f" (outside this collective, seen {self.early:g}s into it: {self.absent})"
        self._end(f"mpignn: error: {head}{tail}")

    def _end(self, message: str) -> None:
        if self.on_expiry is not None:
            self.on_expiry(message)
            return
        print(message, file=sys.stderr, flush=True)
        abort_job(1, alone=True)  # returns where MPI is not running (not initialized, or finalized)
        os._exit(1)  # an expiry ends this process whatever Abort did
