"""Stopping early on Slurm's warning signal or SIGTERM: a handler that only sets a flag, and the requeue request.

The ranks agree on the flag at step boundaries (`mpignn.training.epoch.train_epoch`), so they all stop at the same
step. Stdlib only: no torch, no MPI here.
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
"""Slurm's warning (`--signal=USR2@T`) and what `scancel` and a time limit without `--signal` send (about 30 s
before SIGKILL): both stop the run at the next step, with a checkpoint where --checkpoint-dir is set."""


class StopSignal:
    """Remember which of `signums` (SIGUSR2 and SIGTERM by default) arrived; the handler does nothing else.

    Slurm's `--signal=USR2@120` (without `B:`) signals the tasks of the job steps, and `scancel` sends SIGTERM to
    them: under `srun` those are the ranks, so each usually sees it; one rank seeing it is enough, since the
    ranks agree over MPI before stopping. Hydra's mpiexec (the mpich wheel's 5.0.2) does not forward SIGUSR2:
    sent to mpiexec it kills the job before any rank sees it, sent to its proxy it fails mpiexec and the ranks
    never see it. Under mpiexec, signal the ranks themselves.
    """

    def __init__(self, signums: tuple[int, ...] = STOP_SIGNALS) -> None:
        self.signums, self.requested, self.received = tuple(signums), False, 0
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested, self.received = True, self.received or signum

    def install(self) -> "StopSignal":
        """Install the handler (main thread only, as Python requires); returns self."""
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
    """Ask Slurm to requeue this job (`scontrol requeue $SLURM_JOB_ID`); returns what happened, in words.

    Not collective: rank 0 calls it. Outside Slurm, or when scontrol fails, it says so and changes nothing.
    """
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
