"""torch.distributed set-up: device and backend choice, MPI-driven rendezvous, thread budget. `choose` is a pure
function of a `Hardware` description, so tests fake the hardware.
"""
from __future__ import annotations

import contextlib
import datetime
import importlib
import importlib.util
import logging
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from mpignn import env as _env
from mpignn.config.refusals import check_combinations
from mpignn.errors import LaunchError
from mpignn.mpi import library_version
from mpignn.launch.mpi_store import MPIStore, listening_tcp_store
from mpignn.launch.rendezvous import rendezvous_endpoint

__all__ = ["Hardware", "Choice", "DeviceId", "detect_hardware", "visible_devices", "choose", "agree",
           "init_process_group", "apply_threads", "destroy_process_group", "device_id_accepted"]

log = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda", "xpu")
BACKENDS = ("auto", "gloo", "mpi", "nccl", "xccl", "ccl")
_PREFERRED = {"cuda": ("nccl", "gloo"), "xpu": ("xccl", "ccl"), "cpu": ("gloo",)}  # what `auto` takes, best first
_mpi_store: MPIStore | None = None  # the default group's store; destroy_process_group stops its thread


@dataclass(frozen=True)
class Hardware:
    """What this process can use; `detect_hardware()` fills it, tests build it by hand."""

    cuda_devices: int = 0
    xpu_devices: int = 0
    has_nccl: bool = False
    has_xccl: bool = False  # torch's native oneCCL backend (torch >= 2.8 XPU builds)
    has_ccl: bool = False  # oneccl-bindings-for-pytorch registers "ccl"
    has_ipex: bool = False
    has_mpi_backend: bool = False  # torch built with MPI support


@dataclass(frozen=True)
class Choice:
    """The device this rank computes on and the torch.distributed backend."""

    device: str  # "cpu", "cuda:3", "xpu:1"
    backend: str
    shared_by: int = 1  # node-local ranks computing in this device's memory (this one included)

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]


# A device as plain data: (physical, instance). `physical`: the chip NCCL keys ranks on (PCI address); `instance`:
# the memory a rank computes in (UUID), so MIG slices of one GPU share `physical` but not `instance`.
DeviceId = tuple[str, str]


def _installed(name: str) -> bool:
    """Without importing it: its import may load native libraries."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _xpu_count() -> int:
    xpu = getattr(torch, "xpu", None)
    return xpu.device_count() if xpu is not None and xpu.is_available() else 0


def detect_hardware() -> Hardware:
    """Probe torch (and the optional Intel packages) for devices and backends.

    Before torch 2.4 `torch.xpu` appears only once IPEX is imported, so without an XPU IPEX is tried.
    """
    dist = torch.distributed
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    xpu = _xpu_count()
    try:
        has_ipex = not cuda and importlib.import_module("intel_extension_for_pytorch") is not None
    except Exception:  # a broken optional install counts as absent
        has_ipex = False
    if has_ipex and not xpu:
        xpu = _xpu_count()
    return Hardware(cuda_devices=cuda, xpu_devices=xpu, has_nccl=bool(cuda) and dist.is_nccl_available(),
                    has_xccl=bool(getattr(dist, "is_xccl_available", lambda: False)()),
                    # found, not imported: importing it loads a second oneCCL next to torch's own (xccl); it is
                    # imported in init_process_group, only when the backend is ccl
                    has_ccl=_installed("oneccl_bindings_for_pytorch") if xpu or has_ipex else False,
                    has_ipex=has_ipex, has_mpi_backend=dist.is_mpi_available())


def _resolve(device: str, hw: Hardware) -> str:
    if device == "auto":
        return "cuda" if hw.cuda_devices else "xpu" if hw.xpu_devices else "cpu"
    return device


def _identity(kind: str, index: int, props: Any, mask: list[str]) -> DeviceId:
    """Without a UUID or PCI address from torch, the launcher's visibility mask names the device."""
    named = mask[index] if index < len(mask) else f"{getattr(props, 'name', kind)}#{index}"
    uuid = getattr(props, "uuid", None)
    instance = str(uuid) if uuid not in (None, "") else named
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return instance, instance
    return f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}", instance


def visible_devices(device: str, hw: Hardware) -> tuple[DeviceId, ...]:
    """Return the identities of the devices this process sees, in torch's order; () on CPU or where unreadable
    (then `choose` counts devices). Local: the caller gathers them over the host."""
    kind = _resolve(device, hw)
    count = {"cuda": hw.cuda_devices, "xpu": hw.xpu_devices}.get(kind, 0)
    if not count:
        return ()
    mod = getattr(torch, kind)
    mask = _env.visibility_mask(kind)
    try:
        return tuple(_identity(kind, i, mod.get_device_properties(i), mask) for i in range(count))
    except Exception:  # an old torch or driver without these properties: fall back to counting
        return ()


def choose(device: str, backend: str, hw: Hardware, local_rank: int, local_size: int = 1,
           peers: Sequence[Sequence[DeviceId]] | None = None) -> Choice:
    """Pick the device and backend: CUDA -> nccl, Intel XPU -> xccl (else ccl), CPU -> gloo.

    Each node-local rank takes device `local_rank % count`. Sharing is decided by identities (`peers[r]`: what
    node-local rank r sees), not counts. NCCL refuses ranks sharing a GPU, MIG slices included, so `auto` takes
    gloo there (docs/launchers-and-devices.md); for memory a MIG slice is its own device (`Choice.shared_by`).
    XPU with gloo or mpi is a ConfigError: neither process group takes XPU tensors.
    """
    for flag, value, allowed in (("device", device, DEVICES), ("backend", backend, BACKENDS)):
        if value not in allowed:
            raise LaunchError(f"--{flag} must be one of {', '.join(allowed)}; got '{value}'. HINT: use --{flag} auto")
    device = _resolve(device, hw)
    if device == "cuda" and not hw.cuda_devices:
        raise LaunchError("--device cuda asked for, but torch sees no CUDA device. HINT: check "
                          "CUDA_VISIBLE_DEVICES and that a CUDA build of torch is installed, or use --device cpu")
    if device == "xpu" and not hw.xpu_devices:
        raise LaunchError("--device xpu asked for, but torch sees no XPU. HINT: load the oneAPI environment and "
                          "install an XPU build of torch (pip install -e .[xpu]), or use --device cpu")
    check_combinations({"device": device, "backend": backend})  # XPU with gloo or mpi, as TrainConfig refuses
    count = hw.cuda_devices if device == "cuda" else hw.xpu_devices
    same_chip, shared_by = _sharing(device, count, local_rank, local_size, peers)
    shared = device == "cuda" and same_chip > 1
    available = {"gloo": True, "mpi": hw.has_mpi_backend, "nccl": hw.has_nccl, "xccl": hw.has_xccl, "ccl": hw.has_ccl}
    if backend == "auto":
        backend = "gloo" if shared else next((b for b in _PREFERRED[device] if available[b]), "")
    if not backend:  # an XPU, neither of its backends here
        raise LaunchError("no collective backend for XPU: torch has no 'xccl' and oneccl-bindings-for-pytorch "
                          "is not installed. HINT: pip install -e .[xpu] (IPEX + oneCCL bindings), or use "
                          "a torch >= 2.8 XPU build")
    if backend == "nccl" and shared:
        raise LaunchError(f"--backend nccl needs one GPU per rank, but {same_chip} ranks on this host use one GPU "
                          "(the same device, or MIG slices of one GPU). HINT: one rank per GPU (srun "
                          "--gpus-per-task=1, or fewer ranks per host), or use --backend gloo (or auto)")
    if not available[backend]:
        raise LaunchError(f"--backend {backend} is not available in this torch build; "
                          f"available: {', '.join(b for b, ok in available.items() if ok)}. "
                          f"HINT: use --backend auto, or install the build that provides {backend}")
    if backend == "nccl" and device != "cuda":
        raise LaunchError(f"--backend nccl needs --device cuda; got --device {device}. HINT: use --backend gloo")
    return Choice("cpu" if device == "cpu" else f"{device}:{local_rank % count}", backend, shared_by)


def agree(choice: Choice, chosen: Sequence[tuple[str, str, str]], backend: str) -> Choice:
    """Return this rank's `choice` once every rank's (device type, backend, host) in `chosen` fit one process
    group: under `--backend auto`, GPUs shared on some host (gloo) make every rank take gloo. Not collective, the
    same answer on every rank given the same `chosen`. LaunchError: device types or given backends differ."""
    kinds = {(kind, name) for kind, name, _ in chosen}
    if len(kinds) == 1:
        return choice
    if backend == "auto" and kinds == {("cuda", "nccl"), ("cuda", "gloo")}:
        return replace(choice, backend="gloo")
    by_host = sorted({f"{host}: {kind}/{name}" for kind, name, host in chosen})
    raise LaunchError(f"expected every rank on one device type and backend; got {', '.join(by_host)}. HINT: give "
                      "every host the same accelerators, or pass --device and --backend (e.g. --device cpu)")


def _sharing(device: str, count: int, local_rank: int, local_size: int,
             peers: Sequence[Sequence[DeviceId]] | None) -> tuple[int, int]:
    if device == "cpu":
        return 1, 1
    if peers is None or local_rank >= len(peers) or not peers[local_rank]:
        sharing = -(-max(1, local_size) // max(1, count)) if local_size > count else 1
        return sharing, sharing
    taken = [ids[r % len(ids)] for r, ids in enumerate(peers) if ids]
    mine = peers[local_rank][local_rank % len(peers[local_rank])]
    return sum(t[0] == mine[0] for t in taken), sum(t[1] == mine[1] for t in taken)


def apply_threads(threads: int) -> None:
    """Give torch (and numba, when loaded) `threads` threads."""
    torch.set_num_threads(threads)
    with contextlib.suppress(ImportError):
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


def init_process_group(comm: Any, rank: int, world_size: int, local_rank: int, local_size: int,
                       choice: Choice, timeout_s: float = 600.0) -> None:
    """Collective over `comm`: initialise torch.distributed with no hand-set MASTER_ADDR/MASTER_PORT.

    The address comes from `rendezvous_endpoint` (never loopback across hosts) and the store goes over MPI, so
    no TCP port is opened; a hand-set MASTER_PORT on rank 0 gets a TCPStore on exactly that address.
    """
    dist = torch.distributed
    if dist.is_initialized():
        return
    if choice.device_type != "cpu":
        getattr(torch, choice.device_type).set_device(torch.device(choice.device))
    if choice.backend in ("ccl", "xccl"):
        os.environ.update(_env.ccl_env(local_rank, local_size, library_version()))
    if choice.backend == "ccl":
        # registers the "ccl" backend; imported only for it: xccl is torch's own oneCCL, and a second oneCCL
        # library in the same process is asking for symbol clashes
        importlib.import_module("oneccl_bindings_for_pytorch")
    timeout = datetime.timedelta(seconds=timeout_s)
    kwargs = {"device_id": torch.device(choice.device)} if device_id_accepted(choice, torch.__version__) else {}
    if world_size == 1 and choice.backend != "mpi":
        # no peer to meet: a store in this process, and no MASTER_ADDR/RANK/... left in the environment that a
        # program's child processes (an mpirun it starts) would inherit
        dist.init_process_group(choice.backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout,
                                **kwargs)
        return
    if choice.backend == "mpi":
        dist.init_process_group("mpi", timeout=timeout)
        return
    addr, ifname = rendezvous_endpoint(comm)  # across hosts never a loopback address
    changed = _env.export_torch_env({"MASTER_ADDR": addr, "RANK": rank, "WORLD_SIZE": world_size,
                                     "LOCAL_RANK": local_rank, "LOCAL_WORLD_SIZE": local_size,
                                     **({"GLOO_SOCKET_IFNAME": ifname} if ifname else {})})
    for name, (old, new) in changed.items():
        log.info("overriding %s=%s with %s", name, old, new)
    global _mpi_store
    user_port = comm.bcast(os.environ.get("MASTER_PORT"), root=0)  # rank 0's environment decides, for all
    if user_port:
        store = listening_tcp_store(comm, addr, user_port, world_size, timeout)
    else:
        store = _mpi_store = MPIStore(comm, timeout)
    dist.init_process_group(choice.backend, store=store, rank=rank, world_size=world_size, timeout=timeout,
                            **kwargs)
    # gloo's connect ends sooner on some ranks than on others (docs/failures.md, "Shutting down does not strand
    # a rank")
    comm.Barrier()


def device_id_accepted(choice: Choice, torch_version: str) -> bool:
    """Whether to bind the default group to the rank's device (`init_process_group(device_id=...)`): xccl only
    from torch 2.7 (pytorch/pytorch#143735); gloo and ccl never (two ranks may share a GPU over gloo)."""
    major_minor = tuple(int(p) for p in re.findall(r"\d+", torch_version)[:2])
    pair = (choice.device_type, choice.backend)
    return pair == ("cuda", "nccl") or (pair == ("xpu", "xccl") and major_minor >= (2, 7))


def destroy_process_group() -> None:
    """Tear down torch.distributed and stop the MPI store's serving thread on rank 0."""
    global _mpi_store
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    if _mpi_store is not None:
        _mpi_store.close()
        _mpi_store = None
