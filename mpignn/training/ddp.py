"""DDP around the model: the gradient all-reduce hook (MPI on the host, asynchronous torch.distributed with
device-event timing on an accelerator) and Intel XPU's `ipex.optimize`. Imports torch, never PyG; below `loop`.
"""
from __future__ import annotations

import time
from typing import Any

import torch

from mpignn.launch.device import EventSpans
from mpignn.mpi.watchdog import bounded

__all__ = ["AllreduceTimer", "wrap_ddp", "optimize_for_device"]


class AllreduceTimer:
    """DDP comm hook that all-reduces each gradient bucket and times it.

    On CPU: MPI in place, blocking (why not gloo: docs/launchers-and-devices.md). On a device: torch's async
    all-reduce; `seconds` then sums device-event spans from the last gradient to the last all-reduce: the
    communication backward did not hide."""

    def __init__(self, comm: Any, use_mpi: bool, device: str = "cpu") -> None:
        self.comm, self.use_mpi, self.device = comm, use_mpi, torch.device(device)
        self.spans = EventSpans("cpu" if use_mpi else self.device)
        self._host_s = 0.0

    @property
    def seconds(self) -> float:
        """All-reduce seconds so far (device spans are read here: waits for their end events)."""
        return self._host_s + self.spans.seconds

    def hook(self) -> Any:
        """The hook as a plain function: DDP inspects its name, qualname and annotations."""

        def mpignn_timed_allreduce(state, bucket):  # unannotated on purpose (DDP checks annotations)
            if not self.use_mpi:
                return self._device_allreduce(bucket)
            start = time.perf_counter()
            buf = bucket.buffer()
            with bounded("DDP gradient all-reduce"):
                from mpi4py import MPI

                self.comm.Allreduce(MPI.IN_PLACE, buf.numpy(), op=MPI.SUM)
            buf.div_(self.comm.size)
            self._host_s += time.perf_counter() - start
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut

        return mpignn_timed_allreduce

    def _device_allreduce(self, bucket: Any) -> Any:
        """torch's own timeout bounds it on NCCL/xccl/gloo."""
        last = self.spans.mod is not None and bucket.is_last()
        start = self.spans.event() if last else None
        size = self.comm.size
        with bounded("DDP gradient all-reduce"):
            work = torch.distributed.all_reduce(bucket.buffer(), async_op=True)

        def average(fut: Any) -> torch.Tensor:
            buf = fut.value()[0].div_(size)
            if last:  # the callback's current stream is ordered after the all-reduce
                self.spans.add(start, self.spans.event())
            return buf

        return work.get_future().then(average)


def wrap_ddp(model: torch.nn.Module, comm: Any, device: str) -> tuple[torch.nn.Module, AllreduceTimer | None]:
    """Wrap `model` in DDP with the timed all-reduce hook (identity for one rank)."""
    if comm.size == 1:
        return model, None
    from torch.nn.parallel import DistributedDataParallel as DDP

    on_cpu = torch.device(device).type == "cpu"
    with bounded("DDP's broadcast of the initial parameters"):  # a collective: a silent rank is named
        ddp = DDP(model, device_ids=None if on_cpu else [torch.device(device)])
    timer = AllreduceTimer(comm, use_mpi=on_cpu, device=device)
    ddp.register_comm_hook(None, timer.hook())
    return ddp, timer


def optimize_for_device(model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: str,
                        bf16: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Apply `ipex.optimize` on Intel XPU where IPEX is installed; always float32, even with `bf16`: IPEX's bf16
    makes the weights bf16 (DDP and checkpoints too), autocast gives bf16 compute over fp32 weights."""
    if torch.device(device).type != "xpu":
        return model, optimizer
    try:
        import intel_extension_for_pytorch as ipex
    except ImportError:
        return model, optimizer
    return ipex.optimize(model, optimizer=optimizer, dtype=torch.float32)
