"""`Deadline`: the start-up's bound, before any communicator exists for a `watchdog.Watchdog` to ping.
Stdlib only.
"""
from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["Deadline"]

# The deadline's watcher: a separate process, because MPI_Init holds the GIL (mpi4py calls it without releasing
# it), so no thread of this process runs while a rank waits there. It leaves when its parent is gone.
_WATCHER = """
import os, sys, time
seconds, message, parent = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
end = time.monotonic() + seconds
while time.monotonic() < end:
    if os.getppid() != parent:
        sys.exit(0)
    time.sleep(0.2)
sys.stderr.write(message + "\\n")
sys.stderr.flush()
os.kill(parent, 9)
"""


class Deadline:
    """Kill this process (one line, SIGKILL; the launcher ends the job) when a block overruns `seconds`.
    Not collective."""

    def __init__(self, seconds: float, what: str, rank: int, hint: str) -> None:
        self.seconds = float(seconds)
        self.message = (f"mpignn: error: [rank {rank}] expected {what} to finish within {self.seconds:g}s; got no "
                        f"answer from every rank. HINT: {hint}")
        self._proc: Any = None

    def __enter__(self) -> "Deadline":
        import subprocess

        self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHER, str(self.seconds), self.message,
                                       str(os.getpid())], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._proc.kill()
        self._proc.wait()
