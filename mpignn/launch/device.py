"""Accelerator-generic helpers (CUDA and XPU alike): callers pass a device and never branch on its type; on CPU
every helper is a no-op.
"""
from __future__ import annotations

import platform
import time
from typing import Any, Iterator, Sequence

import torch

__all__ = ["accelerator", "synchronize", "EventSpans", "StepClock", "pinned_empty", "Uploader", "FEATURE_DEVICE_SHARE",
           "features_on_device", "free_memory", "cpu_lacks_bf16_units"]

FEATURE_DEVICE_SHARE = 0.5
"""`--feature-device auto` takes at most this share of a rank's free device memory; the rest is the step's."""


def accelerator(device: str | torch.device) -> Any:
    """Return `torch.cuda` or `torch.xpu` for an accelerator device, None for the CPU."""
    dev = torch.device(device)
    return None if dev.type == "cpu" else getattr(torch, dev.type, None)


def free_memory(device: str | torch.device) -> int | None:
    """Return the bytes free on an accelerator now (other processes' use included); None on a CPU."""
    mod = accelerator(device)
    if mod is None or not hasattr(mod, "mem_get_info"):
        return None
    return int(mod.mem_get_info(torch.device(device))[0])


def cpu_lacks_bf16_units(device: str | torch.device) -> bool:
    """Whether `device` is an x86 CPU without AVX512-BF16 or AMX, where bf16 autocast is emulated and slow
    (docs/failures.md). False where torch cannot tell (the probes are x86-only and private)."""
    if torch.device(device).type != "cpu" or platform.machine().lower() not in ("x86_64", "amd64", "i686", "i386"):
        return False
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return None not in probes and not any(probe() for probe in probes)


def features_on_device(choice: str, exchange: str, device: str | torch.device, parts: int, table_bytes: int,
                       free_bytes: int | None, shared_by: int = 1) -> bool:
    """Whether a rank's feature table lives on its compute device (`--feature-device`).

    auto: only one part on an accelerator, within `FEATURE_DEVICE_SHARE`; several parts stay on the host,
    as their MPI exchange reads host buffers."""
    if exchange == "torch" or choice == "device":
        return True
    if choice == "host" or parts > 1 or free_bytes is None or torch.device(device).type == "cpu":
        return False
    return table_bytes <= FEATURE_DEVICE_SHARE * free_bytes / max(shared_by, 1)


def synchronize(device: str | torch.device) -> None:
    """Wait for the calling thread's current stream, so a host clock read after it measures the work itself.

    Only this stream: a device-wide sync would also wait for the loader's side-stream copies and book them
    in this stage."""
    mod = accelerator(device)
    if mod is not None:
        mod.current_stream(torch.device(device)).synchronize()


def pinned_empty(shape: Sequence[int], dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """Return a page-locked host tensor the device can copy from asynchronously; plain memory on CPU."""
    return torch.empty(tuple(shape), dtype=dtype, pin_memory=accelerator(device) is not None)


def _features(data: Any) -> Iterator[tuple[Any, torch.Tensor]]:
    """(store, x) of each node store of a Data or HeteroData that has features."""
    for store in getattr(data, "node_stores", ()):
        x = store.get("x") if hasattr(store, "get") else None
        if isinstance(x, torch.Tensor):
            yield store, x


def _widen(data: Any) -> Any:
    for store, x in _features(data):
        if x.dtype in (torch.float16, torch.bfloat16):
            store.x = x.float()
    return data


class EventSpans:
    """Spans of device work timed by events and read only when asked, so no step waits for the device."""

    def __init__(self, device: str | torch.device) -> None:
        self.device = torch.device(device)
        self.mod = accelerator(self.device)
        self._done_s = 0.0
        self._spans: list[tuple[Any, Any]] = []  # (start, end) events, not read yet

    def event(self) -> Any:
        """Record a timing event on the calling thread's current stream (None on the CPU)."""
        if self.mod is None:
            return None
        event = self.mod.Event(enable_timing=True)
        event.record(self.mod.current_stream(self.device))
        return event

    def add(self, start: Any, end: Any) -> None:
        self._spans.append((start, end))

    @property
    def seconds(self) -> float:
        """The spans' seconds so far; waits for their end events (read once an epoch, not once a step)."""
        for start, end in self._spans:
            end.synchronize()
            self._done_s += start.elapsed_time(end) / 1000.0
        self._spans.clear()
        return self._done_s


class StepClock(EventSpans):
    """The steps' compute time: the host clock on CPU, device events elsewhere, so no step synchronizes to
    measure it (`tests/test_host_syncs.py`)."""

    def start(self) -> None:
        self._start = self.event() if self.mod is not None else time.perf_counter()

    def stop(self) -> None:
        if self.mod is None:
            self._done_s += time.perf_counter() - self._start
        else:
            self.add(self._start, self.event())


class Uploader:
    """Copies batches to the device on a side stream, so the copy of batch k+1 overlaps batch k's compute.

    `upload` may run in the producer thread and waits for its own copy only; `adopt` runs in the compute thread.
    """

    def __init__(self, device: str | torch.device) -> None:
        self.device = torch.device(device)
        self.mod = accelerator(self.device)
        self.stream = self.mod.Stream(device=self.device) if self.mod is not None else None

    def upload(self, data: Any, resident: bool = False) -> Any:
        """Return `data` on the device, half-precision features widened there (the copy moves half the bytes).

        Features already on the device were written by the caller's stream: the side stream waits for it.
        `resident`: everything is on the device already; only widen."""
        if self.mod is None or resident:
            return _widen(data)
        current = self.mod.current_stream(self.device)
        with self.mod.stream(self.stream):
            if any(x.device.type != "cpu" for _, x in _features(data)):
                self.stream.wait_stream(current)
            data = _widen(data.to(self.device, non_blocking=True))
        self.stream.synchronize()
        return data

    def adopt(self, data: Any) -> Any:
        """Order the compute stream after the copies and `record_stream` the tensors, so the caching allocator
        does not hand their memory to the next copy while kernels read it."""
        if self.mod is None:
            return data
        compute = self.mod.current_stream(self.device)
        compute.wait_stream(self.stream)

        def mark(t: torch.Tensor) -> torch.Tensor:
            if t.device.type == self.device.type and t.device.type != "cpu":
                t.record_stream(compute)
            return t

        return data.apply(mark)
