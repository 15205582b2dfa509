"""Where a rank sits, and the wrong-launcher check."""
from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from mpignn import env as _env
from mpignn.errors import LaunchError, mark_agreed
from mpignn.mpi.startup import start_mpi

__all__ = ["Topology", "world", "library_version", "mpi_op", "topology", "whoami", "check_launcher", "gather_per_host",
           "host_comm"]


def world() -> Any:
    """`MPI.COMM_WORLD` (initialises MPI on first use, through `startup.start_mpi`)."""
    return start_mpi().COMM_WORLD


def library_version() -> str:
    """Return `MPI_Get_library_version`, e.g. "MPICH Version: 4.2.0 ..."."""
    return start_mpi().Get_library_version()


def mpi_op(name: str) -> Any:
    """Return the MPI reduction operation called `name`, importing mpi4py.MPI only now."""
    return getattr(start_mpi(), name)


@dataclass(frozen=True)
class Topology:
    """Where this rank sits: globally, on its host, and which host."""

    rank: int
    world_size: int
    local_rank: int
    local_size: int
    host_rank: int
    num_hosts: int
    host: str


@contextlib.contextmanager
def host_comm(comm: Any) -> Iterator[Any]:
    """Collective over `comm`: yield the communicator of this host's ranks (a shared-memory split, in `comm`'s
    order), valid inside the block only: it is freed after."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    try:
        yield local
    finally:
        local.Free()


def topology(comm: Any) -> Topology:
    """Collective over `comm`. Local rank and size come from a shared-memory split, not the environment, so any
    launcher is right."""
    with host_comm(comm) as local:
        leaders = comm.allgather(comm.rank if local.rank == 0 else -1)
        leader_ranks = sorted(r for r in leaders if r >= 0)
        my_leader = local.bcast(comm.rank if local.rank == 0 else None, root=0)
        return Topology(rank=comm.rank, world_size=comm.size, local_rank=local.rank, local_size=local.size,
                        host_rank=leader_ranks.index(my_leader), num_hosts=len(leader_ranks),
                        host=socket.gethostname())


def gather_per_host(comm: Any, item: Any, describe: Callable[[list[Any]], Any]) -> list[Any] | None:
    """Collective over `comm`: each host's leader (its lowest rank) gathers `item` from its host's ranks and
    sends `describe(items)` to rank 0. Returns, on rank 0, one entry per rank of `comm` (a leader's description,
    None for the other ranks); None elsewhere.
    """
    with host_comm(comm) as local:
        items = local.gather(item, root=0)
        mine = describe(items) if local.rank == 0 else None
    return comm.gather(mine, root=0)


def whoami() -> Topology:
    """Collective over COMM_WORLD under MPI: this process's topology, else the launcher's environment's.
    Raises LaunchError where the wrong `mpirun` started this program (`check_launcher`)."""
    try:
        comm = world()
    except ImportError:
        info = _env.detect()
        return Topology(info.rank, info.world_size, info.local_rank, info.local_size, info.host_rank,
                        info.num_hosts, socket.gethostname())
    check_launcher()
    return topology(comm)


def check_launcher() -> None:
    """Refuse to run when MPI sees one process while the launcher's variables say more (the wrong `mpirun`).

    Not a collective: under that fault every process is alone in its COMM_WORLD, and each raises LaunchError
    alike; the message names the fix.
    """
    expected = _env.foreign_launcher_size()
    if expected > 1 and world().size == 1:
        launch = _env.detect()
        hint = (f"torchrun is not supported, mpignn's ranks come from MPI: mpirun -np {expected} python ..."
                if launch.launcher == "torchrun" else "launch with the mpirun/mpiexec of the MPI that mpi4py was "
                "built against (`python -m mpi4py --mpi-lib-version` names it)")
        raise mark_agreed(LaunchError(
            f"expected MPI to see the {expected} processes the launcher started; got 1 (this is launcher rank "
            f"{launch.rank}, alone in its MPI world, so every process would train and prepare data as "
            f"rank 0 of 1). HINT: {hint}"))
