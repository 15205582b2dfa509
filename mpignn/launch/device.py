"""Accelerator-generic helpers (CUDA and XPU alike): the device's torch module, synchronisation at stage
borders, pinned host buffers, and a side stream for host-to-device copies. Callers pass a device and never
branch on its type; on CPU every helper is a no-op. Imports torch, never torch-geometric.
"""
from __future__ import annotations

import platform
import time
from typing import Any, Sequence

import torch

__all__ = ["accelerator", "synchronize", "EventSpans", "StepClock", "pinned_empty", "Uploader", "FEATURE_DEVICE_SHARE",
           "features_on_device", "free_memory", "cpu_lacks_bf16_units"]

FEATURE_DEVICE_SHARE = 0.5
"""`--feature-device auto` moves a table that takes at most this share of the device memory free to its rank;
the rest is the model's, the step's and the allocator's."""


def accelerator(device: str | torch.device) -> Any:
    """`torch.cuda` or `torch.xpu` for an accelerator device, None for the CPU."""
    dev = torch.device(device)
    return None if dev.type == "cpu" else getattr(torch, dev.type, None)


def free_memory(device: str | torch.device) -> int | None:
    """Bytes free on an accelerator now (the driver's count, other processes' use included); None on a CPU."""
    mod = accelerator(device)
    if mod is None or not hasattr(mod, "mem_get_info"):
        return None
    return int(mod.mem_get_info(torch.device(device))[0])


def cpu_lacks_bf16_units(device: str | torch.device) -> bool:
    """Whether `device` is an x86 CPU that torch knows has neither AVX512-BF16 nor AMX: there bf16 autocast
    emulates its matrix products and runs many times slower than fp32 (docs/failures.md, "Troubleshooting").
    False where torch cannot tell: other architectures (the probes ask for x86 features only; Arm CPUs with
    BF16 instructions would read as lacking them) and a torch whose private probes moved."""
    if torch.device(device).type != "cpu" or platform.machine().lower() not in ("x86_64", "amd64", "i686", "i386"):
        return False
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if any(probe is None for probe in probes):
        return False
    return not any(probe() for probe in probes)


def features_on_device(choice: str, exchange: str, device: str | torch.device, parts: int, table_bytes: int,
                       free_bytes: int | None, shared_by: int = 1) -> bool:
    """Whether a rank's feature table lives on its compute device (`--feature-device`), where a step gathers
    its rows with device index ops instead of copying them from pinned host memory. Always with `--exchange
    torch` (rows cross device to device); auto: one part on an accelerator, where the table fits in
    `FEATURE_DEVICE_SHARE` of the free memory of each rank sharing the device. Several parts stay on the host
    under auto: their MPI exchange reads host buffers."""
    if exchange == "torch" or choice == "device":
        return True
    if choice == "host" or parts > 1 or free_bytes is None or torch.device(device).type == "cpu":
        return False
    return table_bytes <= FEATURE_DEVICE_SHARE * free_bytes / max(shared_by, 1)


def synchronize(device: str | torch.device) -> None:
    """Wait for the calling thread's current stream, so a host clock read after it measures the work itself.

    NCCL/xccl collectives and kernels return when queued; without this, their time lands in whatever stage
    next waits on the device. One call per stage border costs microseconds against milliseconds of work.
    Only the current stream, never the whole device: a device-wide sync would also wait for another
    thread's work (the loader's copies on their side stream) and book it in this stage. Collectives that
    DDP or a blocking torch.distributed call made this stream wait for are covered."""
    mod = accelerator(device)
    if mod is not None:
        dev = torch.device(device)
        mod.current_stream(dev).synchronize()


def pinned_empty(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """A host tensor the device can copy from asynchronously (page-locked); plain memory on CPU."""
    return torch.empty(tuple(shape), dtype=dtype, pin_memory=accelerator(device) is not None)


def _widen(data: Any) -> Any:
    """Half-precision node features (`--feature-dtype`) to float32, in every node store (Data or HeteroData)."""
    for store in getattr(data, "node_stores", ()):
        x = store.get("x") if hasattr(store, "get") else None
        if x is not None and x.dtype in (torch.float16, torch.bfloat16):
            store.x = x.float()
    return data


def _on_device(data: Any) -> bool:
    """Whether any node store's features already live on an accelerator (`--exchange torch`)."""
    for store in getattr(data, "node_stores", ()):
        x = store.get("x") if hasattr(store, "get") else None
        if isinstance(x, torch.Tensor) and x.device.type != "cpu":
            return True
    return False


class EventSpans:
    """Spans of work on an accelerator's stream, timed by events and read only when asked (`seconds`): timing
    a stage this way makes no step wait for the device. On the CPU, `mod` is None and nothing is recorded."""

    def __init__(self, device: str | torch.device) -> None:
        self.device = torch.device(device)
        self.mod = accelerator(self.device)
        self._done_s = 0.0
        self._spans: list[tuple[Any, Any]] = []  # (start, end) events, not read yet

    def event(self) -> Any:
        """A timing event recorded on the calling thread's current stream (None on the CPU)."""
        if self.mod is None:
            return None
        event = self.mod.Event(enable_timing=True)
        event.record(self.mod.current_stream(self.device))
        return event

    def add(self, start: Any, end: Any) -> None:
        self._spans.append((start, end))

    @property
    def seconds(self) -> float:
        """The spans' seconds so far: waits for the last end events (once an epoch, not once a step)."""
        for start, end in self._spans:
            end.synchronize()
            self._done_s += start.elapsed_time(end) / 1000.0
        self._spans.clear()
        return self._done_s


class StepClock(EventSpans):
    """The training steps' compute time: the host clock on the CPU; on an accelerator, an event on the compute
    stream where each step starts and ends, so the epoch line's compute is the device's and no step
    synchronizes to measure it (`tests/test_host_syncs.py`)."""

    def start(self) -> None:
        self._start = self.event() if self.mod is not None else time.perf_counter()

    def stop(self) -> None:
        if self.mod is None:
            self._done_s += time.perf_counter() - self._start
        else:
            self.add(self._start, self.event())


class Uploader:
    """Copies batches to the device on a side stream, so the copy of batch k+1 overlaps batch k's compute.

    `upload` may run in the loader's producer thread: it waits for its own copy only (so the copy's time is
    real and the batch is complete when handed over). `adopt` runs in the compute thread and tells the
    caching allocator that the compute stream uses the tensors, so their memory is not reused by the next
    copy while kernels still read it.
    """

    def __init__(self, device: str | torch.device) -> None:
        self.device = torch.device(device)
        self.mod = accelerator(self.device)
        self.stream = self.mod.Stream(device=self.device) if self.mod is not None else None

    def upload(self, data: Any, resident: bool = False) -> Any:
        """`data` on the device, its half-precision features (`--feature-dtype`) widened to float32 there:
        the copy moves half the bytes, and the widening runs on the side stream too.

        Features already on the device (`--exchange torch`) were written by the caller's current stream
        (`index_copy_` of the gathered rows): the side stream waits for it before reading them. `resident`: every
        tensor is on the device already (a `DeviceSampler` batch gathered there): only widened, on this stream."""
        if self.mod is None or resident:
            return _widen(data)
        current = self.mod.current_stream(self.device)
        with self.mod.stream(self.stream):
            if _on_device(data):
                self.stream.wait_stream(current)
            data = _widen(data.to(self.device, non_blocking=True))
        self.stream.synchronize()
        return data

    def adopt(self, data: Any) -> Any:
        """In the compute thread: order the compute stream after the side stream's copies, and mark the
        batch's tensors as used by it (their memory is not handed to the next copy while kernels read it)."""
        if self.mod is None:
            return data
        compute = self.mod.current_stream(self.device)
        compute.wait_stream(self.stream)

        def mark(t: torch.Tensor) -> torch.Tensor:
            if t.device.type == self.device.type and t.device.type != "cpu":
                t.record_stream(compute)
            return t

        return data.apply(mark)
