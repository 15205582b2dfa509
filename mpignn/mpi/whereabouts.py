"""Where each thread of this rank is (marked collectives, a torch.distributed call, or a line), so the watchdog
can name a collective only some ranks entered well before the timeout. The stdlib only.
"""
from __future__ import annotations

import linecache
import sys
import threading
import time
from typing import Any

__all__ = ["Spots", "verdict"]

# modules whose frames mean "inside a torch.distributed collective" (a Python-level call waiting in C++)
_COLLECTIVE_MODULES = ("torch.distributed", "torch.nn.parallel.distributed")
# a thread whose innermost frame is here waits for work (a pool worker, a queue): it is in no collective
_IDLE_FILES = ("threading.py", "queue.py", "concurrent/futures/thread.py", "selectors.py")
_WRAPPERS = ("wrapper", "inner", "decorator", "_fn")


def _module(frame: Any) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _site(frame: Any) -> str:
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).split("  #")[0].strip()
    where = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"
    return f"{where} (`{line[:80]}`)" if line else where


def _torch_call(frame: Any) -> tuple[str, Any] | None:
    """Only innermost torch.distributed frames count: a thread computing inside DDP's forward is not waiting."""
    run: list[Any] = []
    while frame is not None and _module(frame).startswith(_COLLECTIVE_MODULES):
        run.append(frame)
        frame = frame.f_back
    if not run:
        return None
    named = [f for f in run if f.f_code.co_name not in _WRAPPERS] or run
    return f"{_module(named[-1])}.{named[-1].f_code.co_name}", frame


class Spots:
    """Each thread's spot, sampled every tick: when a spot was first seen is how long the thread has been there
    (a thread blocked in C keeps its innermost frame and line)."""

    def __init__(self) -> None:
        self._first: dict[int, tuple[Any, float]] = {}  # thread ident -> (spot key, first seen)

    def sample(self, slots: dict[int, Any]) -> list[tuple[int, Any, list[str], Any, tuple[str, Any] | None, float]]:
        """Return (ident, frame, marked path, slot, torch call, since) of every other thread."""
        now, me, first, out = time.monotonic(), threading.get_ident(), {}, []
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            slot = slots.get(ident)
            path = list(slot.path) if slot is not None and slot.since else []
            call = _torch_call(frame)
            key = (tuple(path), call[0] if call else "", 0 if path or call else id(frame), frame.f_lineno)
            seen = self._first.get(ident)
            since = slot.since if path else (seen[1] if seen is not None and seen[0] == key else now)
            first[ident] = (key, since)
            out.append((ident, frame, path, slot, call, since))
        self._first = first
        return out

    def report(self, slots: dict[int, Any]) -> list[dict[str, Any]]:
        """Return this rank's busy threads as JSON-ready dicts (thread, path, bounded, torch, at, seconds)."""
        now, names, out = time.monotonic(), {t.ident: t.name for t in threading.enumerate()}, []
        for ident, frame, path, slot, call, since in self.sample(slots):
            idle = frame.f_code.co_filename.endswith(_IDLE_FILES) and not path and call is None
            if idle and names.get(ident) != "MainThread":
                continue
            name, caller = call if call is not None else ("", frame)
            out.append({"thread": names.get(ident, str(ident)), "path": path, "torch": name,
                        "bounded": bool(path) and not slot.limit, "at": _site(caller) if caller is not None else "",
                        "seconds": round(now - since, 1)})
        return out


def describe(rank: int, threads: list[dict[str, Any]]) -> str:
    parts = []
    for t in threads:
        if t["torch"]:
            what = f"waits in {t['torch']}" + (f" called at {t['at']}" if t["at"] else "")
        elif t["path"]:
            what = f"waits in {' > '.join(t['path'])}"
        else:
            what = f"runs {t['at']}"
        parts.append(f"{what} for {t['seconds']:.0f}s (thread {t['thread']})")
    return f"rank {rank} " + ("; ".join(parts) if parts else "runs no thread we can see")


def verdict(rank: int, path: list[str], here: str, replies: dict[int, list[dict[str, Any]]], stuck: float,
            timeout: float) -> tuple[str, str]:
    """Return (message, the ranks outside) for `rank` waiting in `path`, from every other rank's report.

    "" where all are in it; a warning where some are not; an error where each of those waits in another
    collective over `stuck` seconds (neither can finish)."""
    # outermost marks only: ranks inside one marked block may be a collective apart
    absent = {r: threads for r, threads in sorted(replies.items())
              if not (path and any(t["path"] and t["path"][0] == path[0] for t in threads))}
    if not absent:
        return "", ""
    outside = "; ".join(describe(r, t) for r, t in absent.items())
    head = (f"[rank {rank}] expected every rank to enter {' > '.join(path)} ({here}); rank{'s' * (len(absent) > 1)} "
            f"{', '.join(str(r) for r in absent)} did not: {outside}")
    hint = ("HINT: loaders, inference, metrics and DDP's steps are collective: run them on every rank (each its "
            "share, then accuracy(rt, ...)), not under `if rank == 0` (docs/from-pyg.md, 'evaluation')")
    if all(any((t["torch"] or t["bounded"]) and t["seconds"] > stuck for t in threads) for threads in absent.values()):
        return f"mpignn: error: {head}. Neither collective can finish: ending the job. {hint}", outside
    return (f"mpignn: warning: {head}. The job ends at --collective-timeout {timeout:g}s unless "
            f"{'they enter' if len(absent) > 1 else 'it enters'}. {hint}", outside)
