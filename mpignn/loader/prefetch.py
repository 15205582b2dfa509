"""The prefetch policy (`--prefetch`): whether a loader produces batch k+1 in a thread while batch k computes.

Decides from the device, the thread budget, MPI's thread level and how the feature rows travel; refuses
`on` where a thread would be unsafe. Imports mpi4py (inside `overlap`) and errors; never torch.
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from mpignn.config.choices import PREFETCH_MODES, check_choice
from mpignn.errors import ConfigError, mark_agreed

if TYPE_CHECKING:
    from mpignn.launch.bootstrap import Runtime

__all__ = ["overlap", "rows_on_device", "OVERLAP_MIN_THREADS"]


# Below this many threads per rank a CPU rank computes on every core it has, and a producer thread (numba
# sampling, MPI progress polling) takes cores from the matmuls (docs/launchers-and-devices.md).
OVERLAP_MIN_THREADS = 4


def overlap(rt: Runtime, talks: bool, mode: str = "auto", device_exchange: bool = False) -> bool:
    """Whether a loader produces the next batch in a background thread.

    One part (nothing collective in the loader): always, unless `mode` is off. Several parts: the thread
    runs the sampling and exchange collectives (on their own communicator), which needs MPI_THREAD_MULTIPLE;
    `auto` turns it on where compute leaves a core free: on a GPU or XPU (the host thread mostly waits for
    the device), or with at least OVERLAP_MIN_THREADS threads per rank. Never with rows exchanged by
    torch.distributed on a GPU/XPU (`device_exchange`, `--exchange torch` there): the thread's all_to_all
    and DDP's all-reduce would be two communicators in flight on one device from two threads, which NCCL
    does not order (it can hang), and the gathers would share the compute stream anyway. (On CPU the rows
    go over gloo and DDP over MPI: no device, the thread stays allowed.)

    Raises:
        ConfigError: `mode` is not auto, on or off; or it is on, the loader talks to other ranks, and MPI
            lacks MPI_THREAD_MULTIPLE or the rows go by torch.distributed.
    """
    try:
        check_choice("prefetch", mode, PREFETCH_MODES)
    except ConfigError as exc:  # the same mode on every rank
        raise mark_agreed(exc) from None
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
    return threaded and spare


def rows_on_device(features: Any) -> bool:
    """Whether the feature rows are a tensor on an accelerator (exchanged by NCCL/xccl or gloo there)."""
    return not features.on_host and features.x.device.type != "cpu"
