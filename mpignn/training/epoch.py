"""One training epoch and its reduced record, for any `tasks.Task`; DDP and its timed all-reduce are in `ddp`.

Metrics come back as sums (loss x seeds, correct, seeds) so the caller reduces sums, never averages.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

import numpy as np
import torch

from mpignn.tasks.base import MetricSums, autocast, empty_loss, with_rows
from mpignn.training.ddp import AllreduceTimer
from mpignn.launch.allocator import peak_rss_mb, rss_mb
from mpignn.launch.device import StepClock
from mpignn.mpi import allreduce_max, allreduce_sum
from mpignn.tasks import Task
from mpignn.training.record import epoch_record

if TYPE_CHECKING:  # annotations only: bootstrap and the loader are not imported at run time
    from mpignn.launch.bootstrap import Runtime
    from mpignn.loader.local_graph import LocalGraph

__all__ = ["COUNTERS", "EpochParts", "train_epoch", "run_epoch"]


def _progress(step: int, steps: int, loss: float) -> None:
    done = int(30 * step / max(1, steps))
    sys.stderr.write(f"\r  [{'#' * done}{'.' * (30 - done)}] {step}/{steps} loss {loss:.4f}")
    if step == steps:
        sys.stderr.write("\r" + " " * 70 + "\r")
    sys.stderr.flush()


def train_epoch(model: torch.nn.Module, loader: Any, optimizer: torch.optim.Optimizer, *, task: Task, device: str,
                bf16: bool = False, timer: AllreduceTimer | None = None, progress: bool = False,
                comm: Any = None, stop: Any = None, embedding: Any = None) -> dict[str, float]:
    """Collective over `comm` (when given; every rank runs the same steps): train one epoch of `task`.

    Each rank's loss is scaled by world_size / (the step's seeds on all ranks, one tiny all-reduce): DDP
    averages over ranks, so the update is the mean over all seeds whatever each rank's share. A rank without
    seeds still joins DDP with zeros. A stop requested on any rank ends every rank at the same step. Steps are
    numbered from the loader's `start_step` (`BatchLoader.set_epoch` resumes or ends mid-epoch); an `embedding`
    (NodeEmbedding) is pulled and stepped each step. Returns one dict: the sums (loss_sum, correct, seeds, units,
    nodes, steps, compute_s, allreduce_s) and `stopped_step` (-1.0: not stopped).
    """
    model.train()
    clock = StepClock(device)  # device events on an accelerator: no step waits to be timed
    sums = {"loss_sum": 0.0, "correct": 0.0, "seeds": 0.0, "steps": 0.0, "compute_s": 0.0, "allreduce_s": 0.0,
            "stopped_step": -1.0, "units": 0.0, "nodes": 0.0}
    reduce_before, agree_s = (timer.seconds if timer else 0.0), 0.0
    world = comm.size if comm is not None else 1
    rows = RowCounts(world)
    metric_sums = MetricSums(sums, device)
    for step, batch in enumerate(loader, start=getattr(loader, "start_step", 0)):
        n = task.items(batch)
        wants_stop = float(stop is not None and stop.requested)
        t_agree = time.perf_counter()
        step_seeds, stops = allreduce_sum(comm, [n, wants_stop]).tolist() if world > 1 else (n, wants_stop)
        agree_s += time.perf_counter() - t_agree
        if stops:
            sums["stopped_step"] = step
            break
        clock.start()
        optimizer.zero_grad(set_to_none=True)
        with_rows(batch, embedding, device)
        with autocast(device, bf16):
            logits = task.forward(model, batch)
        loss_sum, pred, labels = task.loss(logits, batch, n)
        loss = loss_sum * (world / max(step_seeds, 1))
        if n:
            metric_sums.add("correct", task.count_correct(pred, labels))
            metric_sums.add("loss_sum", loss_sum.detach())
            sums["units"] += task.units(batch)
        else:
            loss = loss + empty_loss(model)
        loss.backward()
        optimizer.step()
        if embedding is not None:
            embedding.step()  # collective: the rows' gradients to their owners, updated there
        clock.stop()
        sums["seeds"] += n
        sums["steps"] += 1
        sums["nodes"] += batch.num_nodes
        rows.add(batch)
        if progress:  # reading the loss waits for the device: only where the bar is shown (a tty)
            _progress(step + 1, len(loader), float(loss_sum.detach()) / max(n, 1))
    metric_sums.flush()
    sums.update(rows.sums())
    # The per-step agreement is where a rank waits for a slower one; the gradient all-reduce runs inside the
    # steps' spans, so compute is what is left of them.
    gradients_s = timer.seconds - reduce_before if timer else 0.0
    sums["allreduce_s"] = gradients_s + agree_s
    sums["compute_s"] = clock.seconds - gradients_s
    return sums


class RowCounts:
    """Count rows a rank's steps computed per layer, and the all-ranks union where known: what `redundancy`
    divides (a cooperative batch's parts are disjoint; an independent one carries `union_rows` when counted)."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.rows = self.counted = self.union = None

    def add(self, batch: Any) -> None:
        sizes = getattr(batch, "num_sampled_nodes", None)
        if not isinstance(sizes, list):  # heterogeneous batches count per type: not here
            return
        rows = np.cumsum(sizes, dtype=np.float64)[::-1]  # layer j computes every hop's rows but the last j
        self.rows = rows if self.rows is None else self.rows + rows
        union = getattr(batch, "union_rows", None)
        if getattr(batch, "halo", None) is not None or self.world == 1:
            union = rows
        elif union is not None:
            union = np.asarray(union, dtype=np.float64) / self.world
        else:
            return
        self.counted = rows if self.counted is None else self.counted + rows
        self.union = union if self.union is None else self.union + union

    def sums(self) -> dict[str, float]:
        return {f"{name}_{j}": v for name, values in (("rows", self.rows), ("counted_rows", self.counted),
                                                      ("union_rows", self.union))
                if values is not None for j, v in enumerate(values.tolist())}


COUNTERS = ("remote_feature_bytes", "cache_hits", "remote_rows", "recent_hits", "remote_structure_bytes",
            "halo_bytes", "input_rows", "kept_rows", "embedding_bytes")
"""What the graph's components count (each reports its own: `counters()`), diffed per epoch and summed over ranks."""


@dataclass(frozen=True)
class EpochParts:
    """What every epoch of a run trains with, made once (`Trainer.prepare`)."""

    rt: Runtime
    model: torch.nn.Module  # DDP-wrapped
    optimizer: torch.optim.Optimizer
    loaders: dict[str, Any]  # train, val, test
    graph: LocalGraph
    bf16: bool = False
    timer: AllreduceTimer | None = None
    stop: Any = None

    def counters(self) -> dict[str, float]:
        """Return every component's counters so far, summed by name."""
        graph, out = self.graph, dict.fromkeys(COUNTERS, 0.0)
        parts = (graph.features, graph.sampler.source, self.loaders["train"].sampler, graph.embedding)
        for part in {id(p): p for p in parts if p is not None}.values():
            for name, value in part.counters().items():
                out[name] += value
        return out


def run_epoch(parts: EpochParts, epoch: int, *, evaluate_now: bool, start_step: int = 0,
              end_step: int | None = None, carry: dict[str, float] | None = None,
              test_if: float | None = None) -> dict[str, Any]:
    """Collective over `rt.comm`: train one epoch (evaluating if `evaluate_now`) and reduce it into one record.

    Sums are divided once; times and memory are the max over ranks. `carry`: the summed `_CARRIED` of the steps
    a stopped epoch did (rank 0 adds them). A stopped epoch is not evaluated; test only once validation
    reaches `test_if`."""
    rt, graph, loaders, model = parts.rt, parts.graph, parts.loaders, parts.model
    task, bf16, emb = graph.task, parts.bf16, graph.embedding
    before = parts.counters()
    start = time.perf_counter()
    loaders["train"].set_epoch(epoch, start_step, end_step)  # val and test: set to 0 before they are read
    sums = train_epoch(model, loaders["train"], parts.optimizer, task=task, device=rt.device, bf16=bf16,
                       timer=parts.timer, progress=rt.rank == 0 and sys.stderr.isatty(), comm=rt.comm,
                       stop=parts.stop, embedding=emb)
    if carry and rt.rank == 0:
        for key in _CARRIED:
            sums[key] += carry.get(key, 0.0)
    stopped = sums["stopped_step"] >= 0
    train_s = time.perf_counter() - start
    train_peak = peak_rss_mb()  # the process's peak so far: where it rises again below, evaluation raised it
    for split in ("val", "test"):  # the same draws at every evaluation: epochs are compared on one sample
        loaders[split].set_epoch(0)
    evaluated = time.perf_counter()
    scores = task.evaluate(rt, model, loaders, now=evaluate_now and not stopped, bf16=bf16, embedding=emb,
                           test_if=test_if)
    eval_s = time.perf_counter() - evaluated
    times = loaders["train"].times
    steps = len(loaders["train"])
    layers = range(len(loaders["train"].sampler.fanouts) + 1)
    counts = {f"{name}_{j}": sums.get(f"{name}_{j}", 0.0) for name in ("rows", "counted_rows", "union_rows")
              for j in layers}
    after = parts.counters()
    local = {**{k: sums[k] for k in ("loss_sum", "correct", "seeds", "units", "nodes", "steps")}, **counts,
             **{name: after[name] - before[name] for name in COUNTERS}}
    keys = sorted(local)
    total = dict(zip(keys, allreduce_sum(rt.comm, [local[k] for k in keys]).tolist()))
    maxima = {"epoch_s": train_s, "eval_s": eval_s, "sample_s": times.sample_s, "exchange_s": times.exchange_s,
              "compute_s": sums["compute_s"], "allreduce_s": sums["allreduce_s"], "peak_rss_mb": peak_rss_mb(),
              "load_peak_rss_mb": graph.load_peak_rss_mb, "wait_s": times.wait_s, "train_peak_rss_mb": train_peak,
              "rss_mb": rss_mb() or 0.0}
    own_rows = [counts[f"rows_{j}"] / max(sums["steps"], 1) for j in layers]  # per step
    reduced = allreduce_max(rt.comm, [*maxima.values(), *own_rows]).tolist()
    slowest = {**dict(zip(maxima, reduced)), "own_rows": reduced[len(maxima):]}
    return epoch_record(
        epoch=epoch, epochs_done=epoch + min(end_step or steps, steps) / max(steps, 1), total=total,
        slowest=slowest, scores=scores, unit=task.unit, layers=len(layers), world_size=rt.world_size,
        graph_fields={"cache_rows": graph.cache_rows, "cache_mib": graph.cache_mib, "graph_mib": graph.graph_mib},
        minibatch=loaders["train"].minibatch,
        stopped_step=int(sums["stopped_step"]) if stopped else None, carried=_CARRIED)


_CARRIED = ("loss_sum", "correct", "seeds", "units")
"""The sums of a stopped epoch's done steps that a resumed run adds back (`run_epoch`'s `carry`)."""
