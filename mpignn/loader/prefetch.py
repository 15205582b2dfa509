"""The prefetch policy (`--prefetch`): whether a loader produces batch k+1 in a thread while batch k computes,
from the device, the thread budget, MPI's thread level and how rows travel. Imports mpi4py (inside `overlap`).
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from mpignn.config.choices import PREFETCH_MODES, check_choice
from mpignn.errors import ConfigError, agreed, mark_agreed

if TYPE_CHECKING:
    from mpignn.launch.bootstrap import Runtime

__all__ = ["overlap", "rows_on_device", "OVERLAP_MIN_THREADS"]


# Below this many threads per rank a CPU rank computes on every core it has, and a producer thread (numba
# sampling, MPI progress polling) takes cores from the matmuls (docs/launchers-and-devices.md).
OVERLAP_MIN_THREADS = 4


def overlap(rt: Runtime, talks: bool, mode: str = "auto", device_exchange: bool = False) -> bool:
    """Whether a loader produces the next batch in a background thread; collective over `rt.comm` where
    several parts `talks` under `auto`.

    One part: always unless off. Several parts need MPI_THREAD_MULTIPLE, and `auto` takes the thread only
    where compute leaves a core free on every rank (a GPU/XPU, or OVERLAP_MIN_THREADS threads). Never with
    `device_exchange` (`--exchange torch` on a GPU/XPU): NCCL does not order two communicators in flight from
    two threads (it can hang). ConfigError: a bad `mode`, or `on` across parts without MPI_THREAD_MULTIPLE or with
    `device_exchange`.
    """
    with agreed(ConfigError):  # the same mode on every rank
        check_choice("prefetch", mode, PREFETCH_MODES)
    if mode == "off":
        return False
    if not talks:
        return True
    if device_exchange:
        if mode == "on":
            raise mark_agreed(ConfigError("--prefetch on cannot run with --exchange torch on a GPU/XPU across parts: "
                              "expected one thread issuing device collectives, got a loader thread beside DDP's. "
                              "HINT: --prefetch auto (off here) or --exchange mpi"))
        return False
    from mpi4py import MPI

    threaded = MPI.Query_thread() >= MPI.THREAD_MULTIPLE
    if mode == "on":
        if not threaded:
            raise mark_agreed(ConfigError("--prefetch on needs MPI_THREAD_MULTIPLE with several parts; this MPI gives "
                              f"level {MPI.Query_thread()}. HINT: --prefetch auto, or an MPI built with threads"))
        return True
    spare = rt.choice.device_type != "cpu" or rt.threads >= OVERLAP_MIN_THREADS
    # agreed: a stop ends every rank at step k, while a prefetching one already has k+1's collectives in flight
    return bool(rt.comm.allreduce(threaded and spare, op=MPI.LAND))


def rows_on_device(features: Any) -> bool:
    """Whether the feature rows are a tensor on an accelerator (exchanged by NCCL/xccl or gloo there)."""
    return not features.on_host and features.x.device.type != "cpu"
