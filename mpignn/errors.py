"""The exception hierarchy. Stdlib only.

An error marked *agreed* is raised on every rank at the same point (after a checked collective), so the ranks
can exit one by one with the message instead of aborting the job.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

__all__ = ["MpignnError", "ConfigError", "LaunchError", "PartitionFormatError", "DatasetError", "mark_agreed",
           "is_agreed", "agreed"]


class MpignnError(Exception):
    """Base of every error mpignn raises on purpose; printed as one line, without a traceback."""


class ConfigError(MpignnError):
    """A flag, config file or argument is invalid."""


class LaunchError(MpignnError):
    """The launcher, MPI, device or backend is not what the job needs."""


class PartitionFormatError(MpignnError):
    """A partition folder is missing, corrupt, or made for another dataset or world size."""


class DatasetError(MpignnError):
    """A dataset is unknown, missing offline, or malformed."""


def mark_agreed(exc: BaseException) -> BaseException:
    """Mark `exc` as raised on every rank alike, so `run_main` exits instead of calling Abort."""
    exc._mpignn_agreed = True  # type: ignore[attr-defined]
    return exc


def is_agreed(exc: BaseException) -> bool:
    return bool(getattr(exc, "_mpignn_agreed", False))


@contextmanager
def agreed(kind: type[BaseException] = MpignnError) -> Iterator[None]:
    """Mark a `kind` error the block raises as agreed (`mark_agreed`, its context dropped): it follows from what
    every rank passes alike. Other errors pass through unmarked."""
    try:
        yield
    except kind as exc:
        raise mark_agreed(exc) from None
