"""Launcher detection from environment variables, and the torch rendezvous variables. Stdlib only.

`detect()` only reads. Writing MASTER_ADDR and friends is the separate, explicit `export_torch_env()`.
Under MPI the communicator is the truth (see `mpignn.mpi.topology`); this module is the fallback when
mpi4py is not in use, and the place where launcher-specific variable names are translated once.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Callable, Mapping

__all__ = ["LaunchInfo", "detect", "export_torch_env", "thread_budget", "cpus_available", "foreign_launcher_size",
           "free_port", "host_address", "tune_allocator", "bound_onednn_cache"]


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
    """World size another MPI's launcher announced (1 if none): MPI found size 1 but this says more means the
    wrong mpirun started us (each rank is then a singleton)."""
    env = os.environ if env is None else env
    for var in ("OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"):
        size = _int(env, var)
        if size is not None and size > 1:
            return size
    return 1


_TORCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def export_torch_env(values: Mapping[str, object], *, overwrite: bool = False,
                     env: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """Write torch.distributed's rendezvous variables; values the user set win unless `overwrite`.

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
            if not overwrite and name in ("MASTER_ADDR", "MASTER_PORT"):
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


def tune_allocator() -> bool:
    """Keep freed memory in glibc's heap instead of unmapping it.

    GNN steps allocate and free tensors of tens of MB each; by default glibc maps and unmaps each one, and
    the kernel zeroes every fresh page: measured here, half of a training step's time was system time. With
    mmap off and trimming raised, a step ran 1.8x faster (fp32 and bf16). Returns False where this is not
    glibc. MPIGNN_MALLOC=system leaves the allocator alone.
    """
    if os.environ.get("MPIGNN_MALLOC", "") == "system":
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_max = -1, -4
    return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


def bound_onednn_cache(capacity: int = 16) -> None:
    """Keep oneDNN's primitive cache small (unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is set).

    Every sampled batch has other row counts, so each bf16 matmul builds a new oneDNN primitive, and the
    default cache keeps 1024 of them: measured here (200k nodes, bf16) the peak grew by 300-400 MiB per epoch
    (2204 -> 3837 MiB over 6 epochs); with 16 it levels off at about 1620 MiB, at the same speed. oneDNN
    reads the variable when it first builds a primitive, so this must run before any compute.
    """
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


def free_port() -> int:
    """A TCP port free right now on this host (bind to port 0 and read what the kernel chose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def host_address() -> str:
    """An address of this host that peers can reach: the one its host name resolves to, else loopback."""
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
    return address
