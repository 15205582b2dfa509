"""Stopping early on Slurm's warning signal or SIGTERM: a handler that only sets a flag, and the requeue request.
The ranks agree on the flag at step boundaries (`train_epoch`). Stdlib only: no torch, no MPI here.
"""
from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

__all__ = ["EXIT_STOPPED", "STOP_SIGNALS", "StopSignal", "requeue"]


EXIT_STOPPED = 75
"""Exit code of a run stopped by SIGUSR2 or SIGTERM (EX_TEMPFAIL: try again later, e.g. with --resume)."""

STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM)
"""Slurm's warning (`--signal=USR2@T`) and what `scancel` or a time limit sends (about 30 s before SIGKILL)."""


class StopSignal:
    """Remember which of `signums` arrived; the handler does nothing else. One rank seeing it is enough: the
    ranks agree over MPI. Hydra's mpiexec does not forward SIGUSR2: signal the ranks themselves (docs/failures.md).
    """

    def __init__(self, signums: tuple[int, ...] = STOP_SIGNALS) -> None:
        self.signums, self.requested, self.received = tuple(signums), False, 0
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested, self.received = True, self.received or signum

    def install(self) -> "StopSignal":
        """Install the handler (main thread only, as Python requires); return self."""
        for signum in self.signums:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self) -> None:
        """Put the previous handlers back."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    @property
    def name(self) -> str:
        """The signal that arrived first (the first of `signums` before any did)."""
        return signal.Signals(self.received or self.signums[0]).name


def requeue(env: dict[str, str] | None = None) -> str:
    """Ask Slurm to requeue this job; return what happened, in words. Not collective: rank 0 calls it."""
    from mpignn.env import slurm_job_id

    env = dict(os.environ if env is None else env)
    job = slurm_job_id(env)
    if not job:
        return "not requeued: SLURM_JOB_ID is not set (not a Slurm job)"
    try:
        res = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not requeued: scontrol requeue {job} failed: {exc}"
    if res.returncode != 0:
        return f"not requeued: scontrol requeue {job} exited {res.returncode}: {res.stderr.strip()[:200]}"
    return f"requeued Slurm job {job}"
