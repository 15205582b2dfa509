"""Launcher detection from environment variables, and the torch rendezvous variables. Stdlib only.

`detect()` only reads; `export_torch_env()` writes. Under MPI the communicator is the truth
(`mpignn.mpi.topology`): this is the fallback without mpi4py, and where launcher variable names are translated.
"""
from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import shutil
import socket
import struct
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["LaunchInfo", "detect", "export_torch_env", "thread_budget", "mem_available_bytes",
           "foreign_launcher_size", "mpiexec_path", "listen_socket", "slurm_job_id", "host_address",
           "bound_onednn_cache", "Interface", "named_interfaces", "socket_ifname", "ipv4_interfaces",
           "pick_shared_address", "visibility_mask", "ccl_env"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchInfo:
    """Who this process is, as its launcher describes it."""

    launcher: str
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_size: int = 1
    host_rank: int = 0
    num_hosts: int = 1


def _int(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env.get(name, "").split("(")[0].split(",")[0])  # Slurm's "4(x2)" and "4,4" start with it
    except ValueError:  # unset, empty or not a number
        return None


# The detectors: a launcher, the variable whose presence marks it, and each LaunchInfo field's variable.
# Order matters: inside an sbatch allocation SLURM_* describe the allocation, not the ranks mpirun started, while
# MPI launchers and torchrun set variables per process. Slurm is last: right only when srun started the ranks.
_DETECTORS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("openmpi", "OMPI_COMM_WORLD_RANK", {
        "rank": "OMPI_COMM_WORLD_RANK", "world_size": "OMPI_COMM_WORLD_SIZE",
        "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK", "local_size": "OMPI_COMM_WORLD_LOCAL_SIZE",
        "host_rank": "OMPI_COMM_WORLD_NODE_RANK"}),
    ("pmix", "PMIX_RANK", {"rank": "PMIX_RANK", "world_size": "PMIX_SIZE",
                           "local_rank": "PMIX_LOCAL_RANK", "local_size": "PMIX_LOCAL_SIZE"}),
    ("mpich", "PMI_RANK", {"rank": "PMI_RANK", "world_size": "PMI_SIZE",
                           "local_rank": "MPI_LOCALRANKID", "local_size": "MPI_LOCALNRANKS"}),
    ("torchrun", "TORCHELASTIC_RUN_ID", {
        "rank": "RANK", "world_size": "WORLD_SIZE", "local_rank": "LOCAL_RANK",
        "local_size": "LOCAL_WORLD_SIZE", "host_rank": "GROUP_RANK"}),
    ("slurm", "SLURM_PROCID", {
        "rank": "SLURM_PROCID", "world_size": "SLURM_NTASKS", "local_rank": "SLURM_LOCALID",
        "local_size": "SLURM_NTASKS_PER_NODE", "host_rank": "SLURM_NODEID", "num_hosts": "SLURM_NNODES"}),
)


def detect(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Describe this process from its launcher's variables (the first of `_DETECTORS` that answers); a single
    process when none is set."""
    env = os.environ if env is None else env
    for launcher, key, fields in _DETECTORS:
        if key in env:
            values = {f: v for f, var in fields.items() if (v := _int(env, var)) is not None}
            info = LaunchInfo(launcher=launcher, **values)
            if "local_size" not in values and info.num_hosts > 0 and info.world_size % info.num_hosts == 0:
                info = replace(info, local_size=info.world_size // info.num_hosts)
            return info
    return LaunchInfo(launcher="none")


def foreign_launcher_size(env: Mapping[str, str] | None = None) -> int:
    """Return the world size an MPI launcher or torchrun announced, 1 if none (more than MPI's 1: the wrong
    launcher started us, each rank a singleton)."""
    env = os.environ if env is None else env
    names = ("OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE") + (("WORLD_SIZE",) if env.get("TORCHELASTIC_RUN_ID")
                                                                  else ())
    sizes = (_int(env, var) or 1 for var in names)
    return next((size for size in sizes if size > 1), 1)


def mpiexec_path() -> str | None:
    """Return the launcher beside this interpreter (the mpich wheel's), else the one on PATH, else None."""
    return shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")


_TORCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
               "GLOO_SOCKET_IFNAME")
_USER_WINS = ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME")


def export_torch_env(values: Mapping[str, object], *, overwrite: bool = False,
                     env: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Write torch.distributed's rendezvous variables; the user's MASTER_ADDR, MASTER_PORT and
    GLOO_SOCKET_IFNAME win unless `overwrite`. Returns {name: (old, new)} for each variable that was set before
    and now differs (the caller logs them).
    """
    env = os.environ if env is None else env  # type: ignore[assignment]
    changed: dict[str, tuple[str, str]] = {}
    for name in [name for name in _TORCH_VARS if name in values]:
        new = str(values[name])
        old = env.get(name)
        if old is not None and old != new:
            if not overwrite and name in _USER_WINS:
                continue
            changed[name] = (old, new)
        env[name] = new
    return changed


def thread_budget(local_size: int, cpus: int | None = None, host_cpus: int | None = None) -> tuple[int, bool]:
    """Return threads per rank so the ranks of one host share its cores without oversubscription.

    A mask (`cpus`) narrower than the host (`host_cpus`) means the launcher bound this rank: the mask is
    then the rank's whole share. Returns (threads, at least 1; whether the ranks outnumber the cores).
    """
    if cpus is None:  # the mask, which Slurm and mpirun bindings narrow (macOS has none)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    host_cpus = (os.cpu_count() or cpus) if host_cpus is None else host_cpus
    local_size = max(1, local_size)
    if cpus < host_cpus:
        return max(1, cpus), False
    return max(1, cpus // local_size), local_size > cpus


def mem_available_bytes(proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """Return the bytes this process can still allocate: MemAvailable, or what its cgroup v2 limit (Slurm,
    a container) leaves when lower; None where neither is known (not Linux)."""
    available = None
    with contextlib.suppress(OSError, ValueError, IndexError), open(os.path.join(proc, "meminfo")) as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
                break
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open(os.path.join(proc, "self", "cgroup")) as f:
            path = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
        if path is not None:
            folder = Path(cgroup_root, path.lstrip("/"))
            limit = (folder / "memory.max").read_text().strip()
            if limit != "max":
                left = max(0, int(limit) - int((folder / "memory.current").read_text()))
                available = left if available is None else min(available, left)
    return available


def bound_onednn_cache(capacity: int = 16) -> None:
    """Keep oneDNN's primitive cache small (unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is set): each batch's row
    counts differ, so every bf16 matmul builds a primitive and the default cache keeps 1024 (docs/failures.md,
    the bf16 row). oneDNN reads the variable once: call this before any compute."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


def slurm_job_id(env: Mapping[str, str] | None = None) -> str:
    """The Slurm job id ("" outside Slurm), for requeueing."""
    return (os.environ if env is None else env).get("SLURM_JOB_ID", "")


def listen_socket(address: str, port: int = 0) -> socket.socket:
    """Return a TCP socket bound to exactly `address` (never all interfaces) and listening (port 0: any).

    The caller hands the open socket on (TCPStore's `master_listen_fd`): a port closed and bound again could
    be taken in between. OSError where the address is not this host's, names every interface (0.0.0.0, 0, ::),
    or the port is taken.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((address, port))
        bound = ipaddress.ip_address(sock.getsockname()[0])  # what was bound, whatever `address` spelled
        if bound.is_unspecified or getattr(getattr(bound, "ipv4_mapped", None), "is_unspecified", False):
            raise OSError(errno.EADDRNOTAVAIL, f"{address} is every interface of this host, not one address")
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def host_address() -> str:
    """An address of this host that peers can reach: the one its host name resolves to, else loopback."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@dataclass(frozen=True)
class Interface:
    """One IPv4 address of a network interface of this host."""

    name: str
    address: str
    prefixlen: int

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_interface(f"{self.address}/{self.prefixlen}").network

    @property
    def is_loopback(self) -> bool:
        return ipaddress.ip_address(self.address).is_loopback

    def __str__(self) -> str:
        return f"{self.name} {self.address}/{self.prefixlen}"


# Read in this order; the first one set names the interface for torch.distributed's rendezvous across hosts.
_IFNAME_VARS = ("MPIGNN_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def named_interfaces(variables: Sequence[str], env: Mapping[str, str] | None = None, *,
                     nccl: bool = True) -> list[tuple[str, str]]:
    """Return (variable, interface) for each interface the comma lists in `variables` name, in their order.

    `nccl`: NCCL's syntax (torch.distributed's variables): `=eth0` means exactly eth0, a leading `^` excludes (so
    names nothing). False: MPI's (UCX's, libfabric's), where `all` and UCX's RDMA ports (`mlx5_0:1`) name none.
    """
    env = os.environ if env is None else env
    values = {var: env.get(var, "").strip() for var in variables}
    names = [(var, n.strip().lstrip("=") if nccl else n.strip()) for var in variables
             if not (nccl and values[var].startswith("^")) for n in values[var].split(",")]
    return [(var, n) for var, n in names if n and (nccl or (n != "all" and ":" not in n))]


def socket_ifname(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """Return (variable, interface) from the first of `_IFNAME_VARS` that names one (`named_interfaces`), else
    None."""
    return next(iter(named_interfaces(_IFNAME_VARS, env)), None)


def ipv4_interfaces() -> list[Interface]:
    """List this host's up interfaces with their primary IPv4 address, loopback included; [] off Linux."""
    try:
        import fcntl
        names = [name for _, name in socket.if_nameindex()]
    except (ImportError, OSError):
        return []
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name in names:
            with contextlib.suppress(OSError):  # no IPv4 address on it
                req = struct.pack("256s", name.encode()[:15])
                flags = struct.unpack("H", fcntl.ioctl(sock.fileno(), 0x8913, req)[16:18])[0]  # SIOCGIFFLAGS
                if not flags & 0x1:  # IFF_UP
                    continue
                addr = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
                mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x891B, req)[20:24])  # SIOCGIFNETMASK
                found.append(Interface(name, addr, ipaddress.ip_network(f"0.0.0.0/{mask}").prefixlen))
    return found


def pick_shared_address(root: list[Interface], others: list[list[Interface]]) -> Interface | None:
    """Return the first non-loopback interface of `root` (rank 0's host) on a subnet every host in `others`
    shares, else None."""
    for iface in [iface for iface in root if not iface.is_loopback]:
        net = iface.network
        if all(any(not o.is_loopback and ipaddress.ip_address(o.address) in net for o in host) for host in others):
            return iface
    return None


# How a launcher narrows the devices a process sees; entry i names the device torch numbers i in that process.
_MASK_VARS = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}


def visibility_mask(kind: str, env: Mapping[str, str] | None = None) -> list[str]:
    """Return the entries of CUDA_VISIBLE_DEVICES ("cuda") or ZE_AFFINITY_MASK ("xpu"), [] when unset: two
    processes whose masks name their device 0 differently see different devices."""
    value = (os.environ if env is None else env).get(_MASK_VARS.get(kind, ""), "")
    return [v.strip() for v in value.split(",") if v.strip()]


def ccl_env(local_rank: int, local_size: int, mpi_library: str,
            env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the oneCCL variables to set under an MPI launcher, less those the user set in `env` (read only).

    Why each (hydra ignores CCL_LOCAL_RANK; MPI transport only on an MPICH-ABI libmpi): see
    docs/launchers-and-devices.md."""
    env = os.environ if env is None else env
    lib = mpi_library.lower()
    mpich_abi = "mpich" in lib or "intel(r) mpi" in lib or "intel mpi" in lib
    wanted: dict[str, str] = {}
    if env.get("CCL_PROCESS_LAUNCHER", "none").strip().lower() == "none":
        wanted.update(CCL_PROCESS_LAUNCHER="none", CCL_LOCAL_RANK=str(local_rank), CCL_LOCAL_SIZE=str(local_size))
    wanted["CCL_ATL_TRANSPORT"] = "mpi" if mpich_abi else "ofi"
    if env.get("CCL_ATL_TRANSPORT", wanted["CCL_ATL_TRANSPORT"]) == "mpi":
        wanted["CCL_KVS_MODE"] = "mpi"
    return {k: v for k, v in wanted.items() if k not in env}
