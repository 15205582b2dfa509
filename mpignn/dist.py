"""torch.distributed set-up: device and backend choice, MPI-driven rendezvous, thread budget.

Imports torch, never torch-geometric. The choice logic (`choose`) is a pure function of a `Hardware`
description, so it is tested with the hardware faked.
"""
from __future__ import annotations

import datetime
import importlib
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

import torch

from mpignn import env as _env
from mpignn.errors import LaunchError
from mpignn.mpi_store import MPIStore, listening_tcp_store

__all__ = ["Hardware", "Choice", "detect_hardware", "choose", "init_process_group", "apply_threads",
           "destroy_process_group", "device_id_accepted"]

log = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda", "xpu")
BACKENDS = ("auto", "gloo", "mpi", "nccl", "xccl", "ccl")
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

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]


def _has_module(name: str) -> bool:
    try:
        importlib.import_module(name)
        return True
    except Exception:  # a broken optional install counts as absent
        return False


def _xpu_count() -> int:
    xpu = getattr(torch, "xpu", None)
    return xpu.device_count() if xpu is not None and xpu.is_available() else 0


def detect_hardware() -> Hardware:
    """Probe torch (and the optional Intel packages) for devices and backends.

    torch >= 2.4 has XPU natively; on older stacks `torch.xpu` appears only once IPEX is imported, so when
    torch alone shows no XPU, IPEX is imported (if installed) and the count read again.
    """
    dist = torch.distributed
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    xpu = _xpu_count()
    has_ipex = _has_module("intel_extension_for_pytorch") if not cuda else False
    if has_ipex and not xpu:
        xpu = _xpu_count()
    return Hardware(
        cuda_devices=cuda,
        xpu_devices=xpu,
        has_nccl=bool(cuda) and dist.is_nccl_available(),
        has_xccl=bool(getattr(dist, "is_xccl_available", lambda: False)()),
        has_ccl=_has_module("oneccl_bindings_for_pytorch") if xpu or has_ipex else False,
        has_ipex=has_ipex,
        has_mpi_backend=dist.is_mpi_available(),
    )


def choose(device: str, backend: str, hw: Hardware, local_rank: int, local_size: int = 1) -> Choice:
    """Pick the device and backend: CUDA -> nccl, Intel XPU -> xccl (else ccl), CPU -> gloo.

    One accelerator per node-local rank (`local_rank % devices`). NCCL refuses two ranks on one GPU
    ("Duplicate GPU detected"), so with more node-local ranks than GPUs `auto` takes gloo instead (on the
    same device tensors) and an explicit nccl is refused. Explicit requests are honoured or refused.

    Raises:
        LaunchError: the requested device or backend is not available here.
    """
    if device not in DEVICES:
        raise LaunchError(f"--device must be one of {', '.join(DEVICES)}; got '{device}'. HINT: use --device auto")
    if backend not in BACKENDS:
        raise LaunchError(f"--backend must be one of {', '.join(BACKENDS)}; got '{backend}'. "
                          "HINT: use --backend auto")
    if device == "auto":
        device = "cuda" if hw.cuda_devices else "xpu" if hw.xpu_devices else "cpu"
    if device == "cuda" and not hw.cuda_devices:
        raise LaunchError("--device cuda asked for, but torch sees no CUDA device. HINT: check "
                          "CUDA_VISIBLE_DEVICES and that a CUDA build of torch is installed, or use --device cpu")
    if device == "xpu" and not hw.xpu_devices:
        raise LaunchError("--device xpu asked for, but torch sees no XPU. HINT: load the oneAPI environment and "
                          "install an XPU build of torch (pip install -e .[xpu]), or use --device cpu")
    shared = device == "cuda" and local_size > hw.cuda_devices
    if backend == "auto":
        backend = "gloo" if shared else _default_backend(device, hw)
    if backend == "nccl" and shared:
        raise LaunchError(f"--backend nccl needs one GPU per rank, but {local_size} ranks share {hw.cuda_devices} "
                          f"GPU(s) on this host. HINT: start at most {hw.cuda_devices} rank(s) per host, or use "
                          "--backend gloo (or auto)")
    available = {"gloo": True, "mpi": hw.has_mpi_backend, "nccl": hw.has_nccl, "xccl": hw.has_xccl,
                 "ccl": hw.has_ccl}
    if not available[backend]:
        raise LaunchError(f"--backend {backend} is not available in this torch build; "
                          f"available: {', '.join(b for b, ok in available.items() if ok)}. "
                          f"HINT: use --backend auto, or install the build that provides {backend}")
    if backend == "nccl" and device != "cuda":
        raise LaunchError(f"--backend nccl needs --device cuda; got --device {device}. HINT: use --backend gloo")
    if device == "cpu":
        return Choice("cpu", backend)
    count = hw.cuda_devices if device == "cuda" else hw.xpu_devices
    return Choice(f"{device}:{local_rank % count}", backend)


def _default_backend(device: str, hw: Hardware) -> str:
    if device == "cuda":
        return "nccl" if hw.has_nccl else "gloo"
    if device == "xpu":
        if hw.has_xccl:
            return "xccl"
        if hw.has_ccl:
            return "ccl"
        raise LaunchError("no collective backend for XPU: torch has no 'xccl' and oneccl-bindings-for-pytorch "
                          "is not installed. HINT: pip install -e .[xpu] (IPEX + oneCCL bindings), or use "
                          "a torch >= 2.8 XPU build")
    return "gloo"


def apply_threads(threads: int) -> None:
    """Give torch (and numba, when loaded) `threads` threads."""
    torch.set_num_threads(threads)
    try:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass


def init_process_group(comm: Any, rank: int, world_size: int, local_rank: int, local_size: int,
                       choice: Choice, timeout_s: float = 600.0) -> None:
    """Collective over `comm`: initialise torch.distributed with no hand-set MASTER_ADDR/MASTER_PORT.

    Rank 0 picks an address the other hosts reach (`mpi.rendezvous_endpoint`: never loopback across hosts)
    and broadcasts it over MPI; gloo binds its interface on that subnet. The store (the key-value table the
    ranks meet in) goes over MPI (`mpi_store.MPIStore`): no TCP port is opened for it, so no neighbour can
    read or change it. A MASTER_PORT set by hand on rank 0 is honoured with a TCPStore listening on exactly
    MASTER_ADDR:MASTER_PORT (not all interfaces). The `mpi` backend needs no rendezvous.
    """
    dist = torch.distributed
    if dist.is_initialized():
        return
    if choice.device_type == "cuda":
        torch.cuda.set_device(torch.device(choice.device))
    elif choice.device_type == "xpu":
        torch.xpu.set_device(torch.device(choice.device))
    if choice.backend == "ccl":
        importlib.import_module("oneccl_bindings_for_pytorch")  # registers the "ccl" backend
    if choice.backend in ("ccl", "xccl"):
        # oneCCL under an MPI launcher does not learn its node-local placement by itself.
        os.environ.setdefault("CCL_LOCAL_RANK", str(local_rank))
        os.environ.setdefault("CCL_LOCAL_SIZE", str(local_size))
    if choice.backend != "mpi":
        from mpignn.mpi import rendezvous_endpoint

        addr, ifname = rendezvous_endpoint(comm)  # across hosts never a loopback address
        changed = _env.export_torch_env({"MASTER_ADDR": addr, "RANK": rank,
                                         "WORLD_SIZE": world_size, "LOCAL_RANK": local_rank,
                                         "LOCAL_WORLD_SIZE": local_size,
                                         **({"GLOO_SOCKET_IFNAME": ifname} if ifname else {})})
        for name, (old, new) in changed.items():
            log.info("overriding %s=%s with %s", name, old, new)
    timeout = datetime.timedelta(seconds=timeout_s)
    kwargs: dict[str, Any] = {}
    if device_id_accepted(choice, torch.__version__):
        kwargs["device_id"] = torch.device(choice.device)
    if choice.backend == "mpi":
        dist.init_process_group("mpi", timeout=timeout)
        return
    global _mpi_store
    user_port = comm.bcast(_env.user_master_port(), root=0)  # rank 0's environment decides, for all
    if user_port:
        store = listening_tcp_store(comm, addr, user_port, world_size, timeout)
    else:
        store = _mpi_store = MPIStore(comm, timeout)
    dist.init_process_group(choice.backend, store=store, rank=rank, world_size=world_size, timeout=timeout,
                            **kwargs)


def device_id_accepted(choice: Choice, torch_version: str) -> bool:
    """Whether to bind the default group to the rank's device (`init_process_group(device_id=...)`).

    NCCL on CUDA: yes (it connects eagerly and knows its GPU). xccl on XPU: from torch 2.7 on; before,
    torch refused any device_id but a CUDA one (pytorch/pytorch#143735 lifted that). gloo and ccl: no, a
    device-bound default group is not what they expect (two ranks sharing a GPU over gloo, say).
    """
    major_minor = tuple(int(p) for p in re.findall(r"\d+", torch_version)[:2])
    if choice.device_type == "cuda":
        return choice.backend == "nccl"
    if choice.device_type == "xpu":
        return choice.backend == "xccl" and major_minor >= (2, 7)
    return False


def destroy_process_group() -> None:
    """Tear down torch.distributed and stop the MPI store's serving thread on rank 0."""
    global _mpi_store
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    if _mpi_store is not None:
        _mpi_store.close()
        _mpi_store = None
