"""Starting MPI: a rank that MPI_Init ends or holds past a bound says so in one line naming this host's
interfaces and how to choose one.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from typing import Any, Iterator, Mapping

from mpignn import env as _env

__all__ = ["start_mpi", "deadline", "passed_on", "interfaces_hint", "mpi_ifnames", "launcher_iface_env"]

_passed: dict[str, str] = {}

# The guard is a process of its own: mpi4py runs MPI_Init holding the GIL, and MPI exits from C on failure, so no
# Python code of this process runs then. A byte on the pipe: done; EOF: this process ended inside the block;
# silence: overran, killed `grace` s after printing, so the other ranks' guards print first (the launcher ends
# all once one is gone). Its own session keeps it alive while the launcher ends the job's process group.
_GRACE = 3.0
_GUARD = """
import os, select, sys
seconds, ended, hung = float(sys.argv[1]), sys.argv[2], sys.argv[3]
parent, grace = int(sys.argv[4]), float(sys.argv[5])
ready, _, _ = select.select([0], [], [], seconds if seconds > 0 else None)
if ready and os.read(0, 1):
    sys.exit(0)
if ended or not ready:
    sys.stderr.write((ended if ready else hung) + "\\n")
    sys.stderr.flush()
if not ready and not select.select([0], [], [], grace)[0]:
    os.kill(parent, 9)
"""


@contextlib.contextmanager
def deadline(seconds: float, hung: str, ended: str = "", grace: float = 0.0) -> Iterator[None]:
    """Kill this process (SIGKILL, `grace` s after printing `hung`; the launcher ends the job) when the block
    overruns `seconds` (0: unbounded); `ended`: the line should the process end inside it. Not collective."""
    args = [str(float(seconds)), ended, hung, str(os.getpid()), str(grace)]
    try:
        guard = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GUARD, *args], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, start_new_session=True)
    except OSError:  # no interpreter to run it (an embedded Python): the block runs unguarded
        guard = None
    try:
        yield
    finally:
        if guard is not None:
            with contextlib.suppress(OSError):  # the guard is gone already
                guard.stdin.write(b"\x01")
                guard.stdin.close()
            guard.wait()


def start_mpi(seconds: float = 0.0) -> Any:
    """Import mpi4py.MPI (MPI_Init, which waits for every rank), guarded; return the module.

    First `mpiexec -iface` goes on to MPICH's ch4 transports, which do not read it (`launcher_iface_env`). A rank
    still inside MPI_Init after `seconds` (0: unbounded) prints its line and is killed.
    """
    if "mpi4py.MPI" in sys.modules:  # MPI_Init ran, or is running
        return sys.modules["mpi4py.MPI"]
    passed = launcher_iface_env()
    os.environ.update(passed)  # set only where unset: what the user gave UCX or libfabric wins
    _passed.update(passed)
    tried, fix = interfaces_hint()
    head = f"mpignn: error: [rank {_env.detect().rank}] expected MPI_Init to connect this rank to the others"
    ended = (f"{head}; got this process ended inside it on {socket.gethostname()} (MPI's reason is above; where "
             f"it is a connection, such as \"Destination is unreachable\" or \"No route to host\": {tried}). "
             f"HINT: {fix}")
    hung = (f"{head} within {seconds:g}s (--collective-timeout); got no answer on {socket.gethostname()} "
            f"({tried}). HINT: either a rank did not start (look at every host's processes) or MPI cannot connect "
            f"the hosts: {fix}")
    with deadline(seconds, hung, ended, _GRACE):
        from mpi4py import MPI
    return MPI


def passed_on() -> dict[str, str]:
    """Return the variables `start_mpi` set from `mpiexec -iface`, for the caller to log once."""
    return dict(_passed)


def interfaces_hint() -> tuple[str, str]:
    """Return the start-up messages' found and HINT parts: the interfaces MPI may take, how to name one."""
    mine = [i for i in _env.ipv4_interfaces() if not i.is_loopback]
    listed = ", ".join(map(str, mine)) or "none with an IPv4 address"
    named = mpi_ifnames()
    if named:
        tried = f"MPI was told {', '.join(f'{var}={name}' for var, name in named)}; this host has {listed}"
    else:
        tried = f"UCX_NET_DEVICES and FI_TCP_IFACE are unset, so MPI may take any of {listed}"
    iface, why = _suggested(mine)
    fix = (f"name the interface the hosts reach each other on, e.g. {iface}{why}: UCX_NET_DEVICES={iface} (UCX, "
           f"MPICH's default; list RDMA ports too, e.g. {iface},mlx5_0:1), FI_TCP_IFACE={iface} (libfabric tcp) or "
           f"mpiexec -iface {iface} (mpignn passes it on); docs/launchers-and-devices.md")
    return tried, fix


def _suggested(mine: list[_env.Interface]) -> tuple[str, str]:
    hydra = os.environ.get("PMI_HOSTNAME", "").strip()  # the name the launcher started this host by
    for name, what in ((hydra, "the address mpiexec started this host by"),
                       (socket.gethostname(), "what the host name resolves to")):
        with contextlib.suppress(OSError):
            address = socket.gethostbyname(name) if name else ""
            for iface in mine:
                if iface.address == address:
                    return iface.name, f" (it holds {address}, {what})"
    return "IFACE", ""


# The variables naming MPI's TCP interfaces: UCX's (':' marks an RDMA port), libfabric's, and `mpiexec -iface`'s,
# which only MPICH's ch3 reads (`launcher_iface_env` passes it on to ch4).
_MPI_IFNAME_VARS = ("UCX_NET_DEVICES", "FI_TCP_IFACE", "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE")


def mpi_ifnames(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """Return (variable, interface) for each interface `_MPI_IFNAME_VARS` name for MPI, in that order."""
    return _env.named_interfaces(_MPI_IFNAME_VARS, env, nccl=False)


def launcher_iface_env(env: Mapping[str, str] | None = None,
                       rdma_root: str = "/sys/class/infiniband") -> dict[str, str]:
    """Return the variables that pass `mpiexec -iface IF` on to ch4, less those set (only reads).
    UCX_NET_DEVICES gets this host's RDMA ports too, so only UCX's TCP is narrowed."""
    env = os.environ if env is None else env
    iface = env.get("MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE", "").strip()
    if not iface:
        return {}
    ports = []
    for dev in sorted(os.listdir(rdma_root)) if os.path.isdir(rdma_root) else []:
        with contextlib.suppress(OSError):
            ports += [f"{dev}:{port}" for port in sorted(os.listdir(os.path.join(rdma_root, dev, "ports")))]
    wanted = {"UCX_NET_DEVICES": ",".join([iface, *ports]), "FI_TCP_IFACE": iface}
    return {k: v for k, v in wanted.items() if k not in env}
