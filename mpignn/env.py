"""Launcher detection from environment variables, and the torch rendezvous variables. Stdlib only.

`detect()` only reads. Writing MASTER_ADDR and friends is the separate, explicit `export_torch_env()`.
Under MPI the communicator is the truth (see `mpignn.mpi.topology`); this module is the fallback when
mpi4py is not in use, and the place where launcher-specific variable names are translated once.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import socket
import struct
from dataclasses import dataclass
from typing import Callable, Mapping

__all__ = ["LaunchInfo", "detect", "export_torch_env", "thread_budget", "cpus_available", "mem_available_bytes",
           "foreign_launcher_size", "listen_socket", "slurm_job_id", "host_address",
           "bound_onednn_cache", "Interface", "socket_ifname", "ipv4_interfaces", "pick_shared_address",
           "user_master_addr", "user_master_port", "visibility_mask", "ccl_env"]

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


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    value = env.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value.split("(")[0].split(",")[0])
    except ValueError:
        return default


def _from_map(launcher: str, key: str, fields: dict[str, str]) -> Callable[[Mapping[str, str]], LaunchInfo | None]:
    """A detector: present when `key` is set; each LaunchInfo field read from its variable."""

    def detector(env: Mapping[str, str]) -> LaunchInfo | None:
        if key not in env:
            return None
        values = {f: _int(env, var) for f, var in fields.items()}
        values = {f: v for f, v in values.items() if v is not None}
        info = LaunchInfo(launcher=launcher, **values)
        if "local_size" not in values and info.num_hosts > 0 and info.world_size % info.num_hosts == 0:
            info = LaunchInfo(**{**info.__dict__, "local_size": info.world_size // info.num_hosts})
        return info

    return detector


# Order matters. MPI launchers come first: inside an sbatch allocation the SLURM_* variables describe the
# allocation (or the batch step), not the ranks that mpirun started, while each mpirun sets its own variables per
# process. torchrun sets RANK/LOCAL_RANK per process too, so it beats Slurm. Slurm is last: it is right only
# when srun itself started the ranks.
_DETECTORS: list[Callable[[Mapping[str, str]], LaunchInfo | None]] = [
    _from_map("openmpi", "OMPI_COMM_WORLD_RANK", {
        "rank": "OMPI_COMM_WORLD_RANK", "world_size": "OMPI_COMM_WORLD_SIZE",
        "local_rank": "OMPI_COMM_WORLD_LOCAL_RANK", "local_size": "OMPI_COMM_WORLD_LOCAL_SIZE",
        "host_rank": "OMPI_COMM_WORLD_NODE_RANK"}),
    _from_map("pmix", "PMIX_RANK", {"rank": "PMIX_RANK", "world_size": "PMIX_SIZE",
                                    "local_rank": "PMIX_LOCAL_RANK", "local_size": "PMIX_LOCAL_SIZE"}),
    _from_map("mpich", "PMI_RANK", {"rank": "PMI_RANK", "world_size": "PMI_SIZE",
                                    "local_rank": "MPI_LOCALRANKID", "local_size": "MPI_LOCALNRANKS"}),
    _from_map("torchrun", "TORCHELASTIC_RUN_ID", {
        "rank": "RANK", "world_size": "WORLD_SIZE", "local_rank": "LOCAL_RANK",
        "local_size": "LOCAL_WORLD_SIZE", "host_rank": "GROUP_RANK"}),
    _from_map("slurm", "SLURM_PROCID", {
        "rank": "SLURM_PROCID", "world_size": "SLURM_NTASKS", "local_rank": "SLURM_LOCALID",
        "local_size": "SLURM_NTASKS_PER_NODE", "host_rank": "SLURM_NODEID", "num_hosts": "SLURM_NNODES"}),
]


def detect(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """Describe this process from its launcher's variables; a single process when none is set.

    Args:
        env: the environment to read (default `os.environ`).
    Returns:
        The first detector's answer, in the order documented at `_DETECTORS`.
    """
    env = os.environ if env is None else env
    for detector in _DETECTORS:
        info = detector(env)
        if info is not None:
            return info
    return LaunchInfo(launcher="none")


def foreign_launcher_size(env: Mapping[str, str] | None = None) -> int:
    """World size a launcher announced (MPI's: Open MPI, PMIx, PMI: MPICH, Intel MPI, srun; or torchrun), 1 if
    none.

    MPI finding size 1 while this says more means the wrong launcher started us (each rank is then a
    singleton); a single-process tool seeing more than 1 was started as one of several copies."""
    env = os.environ if env is None else env
    names = ("OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE") + (("WORLD_SIZE",) if env.get("TORCHELASTIC_RUN_ID")
                                                                  else ())
    for var in names:
        size = _int(env, var)
        if size is not None and size > 1:
            return size
    return 1


_TORCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
               "GLOO_SOCKET_IFNAME")
_USER_WINS = ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME")


def export_torch_env(values: Mapping[str, object], *, overwrite: bool = False,
                     env: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Write torch.distributed's rendezvous variables (and gloo's interface); values the user set for
    MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME win unless `overwrite`.

    Returns:
        {name: (old, new)} for each variable that was set before and now differs (the caller logs them).
    """
    env = os.environ if env is None else env  # type: ignore[assignment]
    changed: dict[str, tuple[str, str]] = {}
    for name in _TORCH_VARS:
        if name not in values:
            continue
        new = str(values[name])
        old = env.get(name)
        if old is not None and old != new:
            if not overwrite and name in _USER_WINS:
                continue
            changed[name] = (old, new)
        env[name] = new
    return changed


def cpus_available() -> int:
    """Cores this process may run on (its affinity mask, which Slurm and mpirun bindings narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def thread_budget(local_size: int, cpus: int | None = None, host_cpus: int | None = None) -> tuple[int, bool]:
    """Threads per rank so the ranks of one host share its cores without oversubscription.

    Args:
        local_size: ranks on this host.
        cpus: cores in this process's affinity mask (default: read it).
        host_cpus: cores on the host (default `os.cpu_count()`). A mask narrower than the host means the
            launcher bound this rank to its own cores: then the mask is the rank's whole share.
    Returns:
        (threads, oversubscribed): at least 1 thread; oversubscribed when there are more ranks than cores.
    """
    cpus = cpus_available() if cpus is None else cpus
    host_cpus = (os.cpu_count() or cpus) if host_cpus is None else host_cpus
    local_size = max(1, local_size)
    if cpus < host_cpus:
        return max(1, cpus), False
    return max(1, cpus // local_size), local_size > cpus


def mem_available_bytes(proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process can still allocate without swapping: the host's MemAvailable, or what is left
    under this process's cgroup v2 memory limit (a Slurm job's, a container's) when that is lower.

    Returns:
        None where neither is known (no /proc/meminfo: not Linux).
    """
    available = None
    try:
        with open(os.path.join(proc, "meminfo")) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(os.path.join(proc, "self", "cgroup")) as f:
            path = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
        if path is not None:
            folder = os.path.join(cgroup_root, path.lstrip("/"))
            with open(os.path.join(folder, "memory.max")) as f:
                limit = f.read().strip()
            if limit != "max":
                with open(os.path.join(folder, "memory.current")) as f:
                    left = max(0, int(limit) - int(f.read().strip()))
                available = left if available is None else min(available, left)
    except (OSError, ValueError, IndexError):
        pass
    return available


def bound_onednn_cache(capacity: int = 16) -> None:
    """Keep oneDNN's primitive cache small (unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is set).

    Every sampled batch has other row counts, so each bf16 matmul builds a new oneDNN primitive, and the
    default cache keeps 1024 of them (the peak it costs: docs/failures.md, the bf16 row). oneDNN reads the
    variable when it first builds a primitive, so this must run before any compute.
    """
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


def slurm_job_id(env: Mapping[str, str] | None = None) -> str:
    """The Slurm job id ("" outside Slurm), for requeueing."""
    return (os.environ if env is None else env).get("SLURM_JOB_ID", "")


def listen_socket(address: str, port: int = 0) -> socket.socket:
    """A TCP socket bound to exactly `address` (never all interfaces) and already listening.

    Port 0 lets the kernel choose; read it from `getsockname()`. The caller keeps the socket open and hands it
    on (TCPStore's `master_listen_fd`): a port that was closed and bound again could be taken in between.

    Raises:
        OSError: the address is not this host's, or the port is taken.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((address, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def host_address() -> str:
    """An address of this host that peers can reach: the one its host name resolves to, else loopback."""
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
    return address


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


# Read in this order; the first one set names the interface for torch.distributed's rendezvous across hosts.
_IFNAME_VARS = ("MPIGNN_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def socket_ifname(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(variable, interface) from the first of MPIGNN_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME
    that names one, else None.

    Their syntax is a comma-separated list; NCCL's `=eth0` means exactly eth0 and a leading `^` makes the
    whole list exclusions. The first plain name is taken; a list of exclusions names nothing.
    """
    env = os.environ if env is None else env
    for var in _IFNAME_VARS:
        value = env.get(var, "").strip()
        if not value or value.startswith("^"):
            continue
        names = [n.strip().lstrip("=") for n in value.split(",")]
        names = [n for n in names if n]
        if names:
            return var, names[0]
    return None


def user_master_addr(env: Mapping[str, str] | None = None) -> str | None:
    """MASTER_ADDR as the user set it (it wins over the address mpignn would pick), else None."""
    env = os.environ if env is None else env
    return env.get("MASTER_ADDR") or None


def user_master_port(env: Mapping[str, str] | None = None) -> str | None:
    """MASTER_PORT as the user set it (the store then listens there, on MASTER_ADDR only), else None."""
    env = os.environ if env is None else env
    return env.get("MASTER_PORT") or None


def ipv4_interfaces() -> list[Interface]:
    """This host's interfaces that are up, each with its (primary) IPv4 address and netmask; Linux only
    (elsewhere an empty list). Loopback interfaces are included: callers filter with `is_loopback`."""
    try:
        import fcntl
        names = [name for _, name in socket.if_nameindex()]
    except (ImportError, OSError):
        return []
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name in names:
            try:
                req = struct.pack("256s", name.encode()[:15])
                flags = struct.unpack("H", fcntl.ioctl(sock.fileno(), 0x8913, req)[16:18])[0]  # SIOCGIFFLAGS
                if not flags & 0x1:  # IFF_UP
                    continue
                addr = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
                mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x891B, req)[20:24])  # SIOCGIFNETMASK
            except OSError:  # no IPv4 address on it
                continue
            found.append(Interface(name, addr, ipaddress.ip_network(f"0.0.0.0/{mask}").prefixlen))
    return found


def pick_shared_address(root: list[Interface], others: list[list[Interface]]) -> Interface | None:
    """The first non-loopback address of the root's host whose subnet every other host has an address in.

    Args:
        root: the interfaces of the host of rank 0 (the rendezvous server).
        others: the interfaces of each other host.
    Returns:
        That interface, or None when no subnet reaches every host.
    """
    for iface in root:
        if iface.is_loopback:
            continue
        net = iface.network
        if all(any(not o.is_loopback and ipaddress.ip_address(o.address) in net for o in host) for host in others):
            return iface
    return None


# The variable through which a launcher (srun --gpus-per-task, a wrapper script) narrows the devices a process
# sees; entry i of its comma-separated list names the device torch numbers i in that process.
_MASK_VARS = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}


def visibility_mask(kind: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The entries of CUDA_VISIBLE_DEVICES (kind "cuda") or ZE_AFFINITY_MASK ("xpu"), [] when unset.

    Entry i names what this process calls device i (an index, a UUID, a MIG UUID, or "card.tile"), so two
    processes whose masks give their device 0 different names see different devices."""
    env = os.environ if env is None else env
    value = env.get(_MASK_VARS.get(kind, ""), "").strip()
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def ccl_env(local_rank: int, local_size: int, mpi_library: str,
            env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The oneCCL variables to set for a job started by an MPI launcher; those the user set are left out.

    oneCCL reads CCL_LOCAL_RANK/CCL_LOCAL_SIZE only with CCL_PROCESS_LAUNCHER=none; its default launcher
    (hydra) reads MPI_LOCALRANKID/MPI_LOCALNRANKS, which Open MPI and srun do not set. So the node-local
    placement, taken from the MPI communicator, goes with CCL_PROCESS_LAUNCHER=none. oneCCL's MPI transport
    loads an MPICH-ABI libmpi (MPICH, Intel MPI, Cray MPICH): under one, the transport and its key-value
    store go over MPI (CCL_ATL_TRANSPORT=mpi, CCL_KVS_MODE=mpi, as ALCF's Aurora settings do); under
    another MPI (Open MPI) the transport is libfabric (ofi). CCL_ZE_IPC_EXCHANGE is left to the site: which of
    pidfd (needs Linux >= 5.6 and ptrace rights), drmfd or sockets works depends on the kernel and container.

    Args:
        local_rank, local_size: this rank's place on its host (`mpi.topology`).
        mpi_library: the MPI library's version string (`mpi.library_version()`); env: read, never changed.
    Returns:
        {variable: value} for the caller to write.
    """
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
