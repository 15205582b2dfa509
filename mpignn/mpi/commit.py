"""Committing a folder that several ranks write as one unit (checkpoint generations, predictions): a write that
failed anywhere is the same one-line problem on every rank, and the half-written folder is removed.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from mpignn.mpi.watchdog import bounded

__all__ = ["commit_folder", "manifest_bytes", "os_problem"]


def os_problem(exc: OSError) -> str:
    """Return an OSError as a problem line: "PermissionError: [Errno 13] ..."."""
    return f"{type(exc).__name__}: {exc}"


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """Return the manifest as every mpignn folder writes it: sorted keys, one-space indent, a final newline."""
    return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()


def commit_folder(comm: Any, write_own: Callable[[], Any], prepare: Callable[[list[Any]], Any],
                  finish: Callable[[Any], None], *, writer: bool, cleanup: Callable[[], None]) -> str:
    """Collective over `comm`: commit one folder; return "" once complete, else the first problem on every rank.

    Only OSError counts as a problem; anything else propagates (and `run_main` aborts the job). `write_own`
    returns what rank 0's `prepare` needs of this rank's files (sizes, hashes); `prepare`'s value (the manifest)
    is broadcast to the `writer` ranks (rank 0, or each host's first where node-local), whose `finish` completes
    the folder, the manifest last.
    """
    report, problem = None, ""
    try:
        report = write_own()
    except OSError as exc:
        problem = f"rank {comm.rank}: {os_problem(exc)}"
    with bounded("commit folder (gather)"):
        reports = comm.gather((problem, report), root=0)
    payload = None
    if comm.rank == 0:
        problem = next((p for p, _ in reports if p), "")
        if not problem:
            try:
                payload = prepare([r for _, r in reports])
            except OSError as exc:
                problem = f"rank 0: {os_problem(exc)}"
    with bounded("commit folder (bcast)"):
        problem, payload = comm.bcast((problem, payload), root=0)
    if not problem and writer:
        try:
            finish(payload)
        except OSError as exc:
            problem = f"rank {comm.rank}: {os_problem(exc)}"
    with bounded("commit folder (allgather)"):
        problem = next((p for p in comm.allgather(problem) if p), "")
    if problem and writer:
        cleanup()
    return problem
