"""Starting a rank: `bootstrap` returns the `Runtime` every layer above takes; `reduce_sums` and `shutdown` close
the loop a user writes.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpignn.config.train_config import TrainConfig
from mpignn.env import bound_onednn_cache, detect, thread_budget
from mpignn.errors import LaunchError, MpignnError
from mpignn.launch import process_group as dist
from mpignn.launch.allocator import policy as malloc_policy, tune_allocator
from mpignn.launch.device import synchronize
from mpignn.log import setup_logging
from mpignn.mpi import Topology, abort_on_uncaught, allreduce_sum, check_all, check_launcher, topology, world
from mpignn.mpi.startup import deadline, passed_on, start_mpi
from mpignn.mpi.watchdog import Watchdog, watch, watching

__all__ = ["Runtime", "bootstrap", "reduce_sums", "shutdown"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    """This rank's place in the job and what it computes on."""

    comm: Any
    topo: Topology
    choice: dist.Choice
    threads: int

    @property
    def device(self) -> str:
        return self.choice.device

    @property
    def rank(self) -> int:
        return self.topo.rank

    @property
    def world_size(self) -> int:
        return self.topo.world_size

    def synchronize(self) -> None:
        """Wait for this rank's device (where PyG's scripts call `torch.cuda.synchronize()`); no-op on CPU."""
        synchronize(self.device)


def bootstrap(device: str = TrainConfig.device, backend: str = TrainConfig.backend, threads: int = TrainConfig.threads,
              *, logging_setup: bool = True, comm: Any = None, tune_process: bool = False,
              collective_timeout: float = TrainConfig.collective_timeout) -> Runtime:
    """Collective over COMM_WORLD (or `comm`): topology, logging, thread budget, device, torch.distributed.

    `tune_process` also tunes malloc and oneDNN's cache as `python -m mpignn.train` does: off by default, as it
    changes the whole process; turn it on before any torch compute runs. torch's timeout is a little longer than
    `collective_timeout`, so the watchdog names a stopped rank first. Raises LaunchError on every rank alike when
    the device or backend is not there, or the wrong `mpirun` started the job.
    """
    # Bounded, so a rank that never starts (or stops) ends the job instead of leaving the others waiting.
    # MPI_Init's own guard names the interfaces, the usual reason MPI cannot connect the hosts.
    began = time.monotonic()
    if comm is None:
        start_mpi(collective_timeout)
    left = max(1.0, collective_timeout - (time.monotonic() - began))
    with deadline(left, f"mpignn: error: [rank {detect().rank}] expected the start-up and the rendezvous "
                  f"(bootstrap) to finish within {left:g}s; got no answer from every rank. HINT: a rank did not "
                  f"start or stopped: look at every host's processes; raise --collective-timeout where start-up "
                  f"is that slow"):
        check_launcher()
        comm = world() if comm is None else comm
        topo = topology(comm)
        if logging_setup:
            setup_logging(topo.rank, topo.world_size, topo.host)
        if passed_on() and topo.local_rank == 0:
            log.info("mpiexec -iface passed on to MPI's transports on %s: %s", topo.host,
                     " ".join(f"{k}={v}" for k, v in sorted(passed_on().items())))
        budget, oversubscribed = thread_budget(topo.local_size)
        if oversubscribed and topo.local_rank == 0:
            log.warning("%d ranks share %d cores on %s: oversubscribed, expect slow steps. HINT: fewer ranks per "
                        "host (mpirun -ppn) or more cores per task", topo.local_size, os.cpu_count(), topo.host)
        threads = threads or budget
        dist.apply_threads(threads)
        if tune_process:
            tune_allocator()
            bound_onednn_cache()
            log_malloc(comm, topo.rank, topo.host)
        error, kind = "", LaunchError
        hw = dist.detect_hardware()
        # which devices each rank sees, by identity (one allgather at start-up): ranks that each see one GPU
        # (srun --gpus-per-task=1, a per-rank CUDA_VISIBLE_DEVICES) do not share it
        seen = comm.allgather((topo.host_rank, dist.visible_devices(device, hw) if device in dist.DEVICES else ()))
        peers = [ids for host, ids in seen if host == topo.host_rank]  # in local-rank order (topology's split key)
        try:
            choice = dist.choose(device, backend, hw, topo.local_rank, topo.local_size, peers)
        except MpignnError as exc:
            error, kind = str(exc) or type(exc).__name__, type(exc)
        check_all(comm, not error, error, kind)
        # one process group: hosts that chose apart (GPUs shared on one, a host without any) agree or refuse alike
        choice = dist.agree(choice, comm.allgather((choice.device_type, choice.backend, topo.host)), backend)
        # on one rank too, so DistributedDataParallel(model) in a script runs unchanged under `mpirun -np 1`
        dist.init_process_group(comm, topo.rank, topo.world_size, topo.local_rank, topo.local_size, choice,
                                timeout_s=Watchdog.reported_within(collective_timeout))
        # after torch's own hook (which buffers what it prints): a script's uncaught exception on one rank ends
        # the job with the rank and cause named, instead of leaving the others waiting in their next collective
        abort_on_uncaught()
        alias_script()
        if topo.world_size > 1:  # every mpignn collective bounded; one a subset of ranks entered is named early
            watch(comm, collective_timeout)
        log.info("%d ranks on %d hosts, %d threads each, device %s, backend %s", topo.world_size, topo.num_hosts,
                 threads, choice.device, choice.backend)
        return Runtime(comm=comm, topo=topo, choice=choice, threads=threads)


def alias_script() -> None:
    """Alias `__main__` under the script's file name: PyG's `Sequential` imports its caller by that name, which
    would run the script again inside its own `Sequential(...)`, every collective twice."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    name = Path(path).stem if path else ""
    if name.isidentifier() and getattr(sys.modules.get(name), "__file__", path) == path:
        sys.modules[name] = main


def log_malloc(comm: Any, rank: int, host: str) -> None:
    """Collective over `comm`: rank 0 logs the malloc in force, per host where hosts differ."""
    seen: dict[str, list[str]] = {}
    for where, what in comm.allgather((host, malloc_policy())):
        if where not in seen.setdefault(what, []):
            seen[what].append(where)
    if rank != 0:
        return
    if len(seen) == 1:
        log.info("malloc: %s (docs/failures.md, 'Memory over long runs')", next(iter(seen)))
    else:
        log.warning("malloc differs between hosts: %s. HINT: preload the same allocator on every host (LD_PRELOAD "
                    "in the job script, jobs/*.sbatch)", "; ".join(f"{', '.join(h)}: {w}" for w, h in seen.items()))


def reduce_sums(rt: Runtime, values: dict[str, float]) -> dict[str, float]:
    """Collective over `rt.comm`: sum each value over the ranks (divide after; never average averages)."""
    keys = sorted(values)
    summed = allreduce_sum(rt.comm, [values[k] for k in keys])
    return dict(zip(keys, summed.tolist()))


def shutdown() -> None:
    """Tear down torch.distributed and stop the watchdog (MPI finalises itself at exit)."""
    dog = watching()
    if dog is not None:
        dog.stop()
    dist.destroy_process_group()
