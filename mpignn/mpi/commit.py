"""Committing a folder that several ranks write as one unit, and agreeing on its failure: each rank writes its
own files, rank 0 prepares what completes the folder (a manifest, written last), the writers finish it, and a
write that failed anywhere (a full disk, a lost mount) is the same one-line problem on every rank, after which
the half-written folder is removed. Checkpoint generations and the predictions folder are both committed so.

Stdlib and mpi4py only (through `comm`); the manifest's bytes come from `manifest_bytes`.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from mpignn.mpi.watchdog import bounded

__all__ = ["commit_folder", "manifest_bytes", "os_problem"]


def os_problem(exc: OSError) -> str:
    """An OSError as a problem line: "PermissionError: [Errno 13] ..."."""
    return f"{type(exc).__name__}: {exc}"


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    """The manifest as every mpignn folder writes it: sorted keys, one-space indent, a final newline."""
    return (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()


def commit_folder(comm: Any, write_own: Callable[[], Any], prepare: Callable[[list[Any]], Any],
                  finish: Callable[[Any], None], *, writer: bool, cleanup: Callable[[], None]) -> str:
    """Collective over `comm`: commit one folder; returns "" once it is complete for every rank, else the first
    problem ("rank R: ...", the same on every rank) after `cleanup()` ran on the writers.

    Args:
        write_own: this rank's files; returns what rank 0 needs of them (sizes, hashes, ...).
        prepare: rank 0 only, once every rank wrote: from the ranks' returns (in rank order), what the writers
            need to complete the folder (e.g. the manifest), broadcast to every rank.
        finish: the ranks with `writer` set: complete the folder from `prepare`'s value (the manifest last;
            a rename into place).
        writer: whether this rank finishes (and cleans up) the folder: rank 0, or each host's first rank
            where the folder may be node-local.
    Only OSError counts as a problem; anything else propagates (and `run_main` aborts the job).
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
