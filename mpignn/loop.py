"""One training epoch and one evaluation pass, with DDP and a timed gradient all-reduce.

Metrics come back as sums (loss x seeds, correct, seeds) so the caller reduces sums, never averages.
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

from mpignn.models import forward_batch
from mpignn.mpi import allreduce_max, allreduce_sum

__all__ = ["optimize_for_device", "wrap_ddp", "AllreduceTimer", "train_epoch", "evaluate", "autocast", "run_epoch"]


class AllreduceTimer:
    """DDP comm hook that all-reduces each gradient bucket and times it.

    On CPU it uses MPI (mpi4py, in place on the bucket's memory: about 10 us latency here against gloo's
    300 us); elsewhere torch.distributed on the device. The call is synchronous, so `seconds` is the real
    all-reduce time and the rest of backward is compute.
    """

    def __init__(self, comm: Any, use_mpi: bool) -> None:
        self.comm, self.use_mpi, self.seconds = comm, use_mpi, 0.0

    def hook(self) -> Any:
        """The hook as a plain function: DDP inspects its name, qualname and annotations."""

        def mpignn_timed_allreduce(state, bucket):  # unannotated on purpose (DDP checks annotations)
            start = time.perf_counter()
            buf = bucket.buffer()
            if self.use_mpi:
                from mpi4py import MPI

                self.comm.Allreduce(MPI.IN_PLACE, buf.numpy(), op=MPI.SUM)
            else:
                torch.distributed.all_reduce(buf)
            buf.div_(self.comm.size)
            self.seconds += time.perf_counter() - start
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut

        return mpignn_timed_allreduce


def wrap_ddp(model: torch.nn.Module, comm: Any, device: str) -> tuple[torch.nn.Module, AllreduceTimer | None]:
    """DDP over the initialised process group (identity for one rank), with the timed all-reduce hook."""
    if comm.size == 1:
        return model, None
    from torch.nn.parallel import DistributedDataParallel as DDP

    on_cpu = torch.device(device).type == "cpu"
    ddp = DDP(model, device_ids=None if on_cpu else [torch.device(device)])
    timer = AllreduceTimer(comm, use_mpi=on_cpu)
    ddp.register_comm_hook(None, timer.hook())
    return ddp, timer


def optimize_for_device(model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: str,
                        bf16: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """On Intel XPU with intel-extension-for-pytorch installed, apply `ipex.optimize` to model and optimizer
    (as Intel's examples do); elsewhere return them unchanged."""
    if torch.device(device).type != "xpu":
        return model, optimizer
    try:
        import intel_extension_for_pytorch as ipex
    except ImportError:
        return model, optimizer
    return ipex.optimize(model, optimizer=optimizer, dtype=torch.bfloat16 if bf16 else torch.float32)


def autocast(device: str, bf16: bool) -> contextlib.AbstractContextManager:
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def _empty_loss(model: torch.nn.Module) -> torch.Tensor:
    """A zero loss touching every parameter: a rank with no seeds still joins DDP's all-reduce."""
    return sum(p.sum() * 0.0 for p in model.parameters())  # type: ignore[return-value]


def _progress(show: bool, step: int, steps: int, loss: float) -> None:
    """A one-line progress bar on rank 0 when stderr is a terminal (batch jobs get the epoch lines only)."""
    if show:
        done = int(30 * step / max(1, steps))
        sys.stderr.write(f"\r  [{'#' * done}{'.' * (30 - done)}] {step}/{steps} loss {loss:.4f}")
        if step == steps:
            sys.stderr.write("\r" + " " * 70 + "\r")
        sys.stderr.flush()


def train_epoch(model: torch.nn.Module, loader: Any, optimizer: torch.optim.Optimizer, *, device: str,
                bf16: bool = False, timer: AllreduceTimer | None = None, progress: bool = False) -> dict[str, float]:
    """Train one epoch (with a progress bar when `progress`). Returns sums: loss_sum, correct, seeds, steps,
    compute_s, allreduce_s."""
    model.train()
    sums = {"loss_sum": 0.0, "correct": 0.0, "seeds": 0.0, "steps": 0.0, "compute_s": 0.0, "allreduce_s": 0.0}
    reduce_before = timer.seconds if timer else 0.0
    for batch in loader:
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        n = batch.batch_size
        with autocast(device, bf16):
            logits = forward_batch(model, batch) if n else None
        if logits is None:
            loss = _empty_loss(model)
        else:
            labels = batch.y[:n]
            loss = F.cross_entropy(logits.float(), labels)
            sums["correct"] += float((logits.argmax(-1) == labels).sum())
            sums["loss_sum"] += float(loss.detach()) * n
        loss.backward()
        optimizer.step()
        sums["seeds"] += n
        sums["steps"] += 1
        sums["compute_s"] += time.perf_counter() - t0
        _progress(progress, int(sums["steps"]), len(loader), float(loss.detach()))
    if timer:
        sums["allreduce_s"] = timer.seconds - reduce_before
        sums["compute_s"] -= sums["allreduce_s"]
    return sums


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: Any, *, device: str, bf16: bool = False) -> dict[str, float]:
    """Accuracy sums over the loader's seeds: correct, seeds."""
    model.eval()
    module = getattr(model, "module", model)  # no DDP in evaluation: there are no gradients to sync
    correct = seen = 0.0
    for batch in loader:
        n = batch.batch_size
        if not n:
            continue
        with autocast(device, bf16):
            logits = forward_batch(module, batch)
        correct += float((logits.argmax(-1) == batch.y[:n]).sum())
        seen += n
    return {"correct": correct, "seeds": seen}


def run_epoch(rt: Any, epoch: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
              loaders: dict[str, Any], *, bf16: bool, timer: AllreduceTimer | None, evaluate_now: bool,
              graph: Any) -> dict[str, Any]:
    """Collective over `rt.comm`: train one epoch (and evaluate val/test on every rank's share when
    `evaluate_now`), then reduce everything into one record (sums divided once; times are the max over
    ranks; memory is the max over ranks)."""
    from mpignn.report import peak_rss_mb

    features, hops = graph.features, graph.sampler.source
    feat_bytes0, hit0, rows0 = features.bytes_received, features.cache_hits, features.remote_rows
    struct0 = getattr(hops, "bytes_received", 0)
    start = time.perf_counter()
    for loader in loaders.values():
        loader.set_epoch(epoch)
    sums = train_epoch(model, loaders["train"], optimizer, device=rt.device, bf16=bf16, timer=timer,
                       progress=rt.rank == 0 and sys.stderr.isatty())
    train_s = time.perf_counter() - start
    ev = {"val_correct": 0.0, "val_seeds": 0.0, "test_correct": 0.0, "test_seeds": 0.0}
    if evaluate_now:
        for split in ("val", "test"):
            res = evaluate(model, loaders[split], device=rt.device, bf16=bf16)
            ev[f"{split}_correct"], ev[f"{split}_seeds"] = res["correct"], res["seeds"]
    times = loaders["train"].times
    local = {**{k: sums[k] for k in ("loss_sum", "correct", "seeds")}, **ev,
             "remote_feature_bytes": features.bytes_received - feat_bytes0,
             "remote_structure_bytes": getattr(hops, "bytes_received", 0) - struct0,
             "cache_hits": features.cache_hits - hit0, "remote_rows": features.remote_rows - rows0}
    keys = sorted(local)
    total = dict(zip(keys, allreduce_sum(rt.comm, [local[k] for k in keys]).tolist()))
    slowest = allreduce_max(rt.comm, [train_s, times.sample_s, times.exchange_s, sums["compute_s"],
                                      sums["allreduce_s"], peak_rss_mb(), graph.load_peak_rss_mb]).tolist()
    frac = lambda a, b: (total[a] / total[b]) if total[b] else None  # noqa: E731
    return {
        "epoch": epoch, "loss": frac("loss_sum", "seeds") or 0.0, "train_acc": frac("correct", "seeds"),
        "val_acc": frac("val_correct", "val_seeds") if evaluate_now else None,
        "test_acc": frac("test_correct", "test_seeds") if evaluate_now else None,
        "epoch_s": slowest[0], "seeds_per_s": total["seeds"] / slowest[0] if slowest[0] else 0.0,
        "sample_s": slowest[1], "exchange_s": slowest[2], "compute_s": slowest[3], "allreduce_s": slowest[4],
        "remote_feature_bytes": int(total["remote_feature_bytes"]),
        "remote_structure_bytes": int(total["remote_structure_bytes"]),
        "cache_hit_rate": (total["cache_hits"] / total["remote_rows"]) if total["remote_rows"] else 0.0,
        "peak_rss_mb": slowest[5], "load_peak_rss_mb": slowest[6], "world_size": rt.world_size,
    }

