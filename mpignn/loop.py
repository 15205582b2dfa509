"""One training epoch and one evaluation pass (DDP and its timed gradient all-reduce are in `ddp`).

Metrics come back as sums (loss x seeds, correct, seeds) so the caller reduces sums, never averages.
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from mpignn.ddp import AllreduceTimer
from mpignn.device import synchronize
from mpignn.metrics import LinkScores
from mpignn.models import forward_batch
from mpignn.mpi import allreduce_max, allreduce_sum

__all__ = ["train_epoch", "evaluate", "autocast", "run_epoch", "with_rows"]


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


def with_rows(batch: Any, embedding: Any, device: str, train: bool = True) -> None:
    """Collective when `embedding` is given (every rank, every batch, empty ones too): append the batch
    nodes' learnable rows to `batch.x` (they take gradients in training). On a heterogeneous batch only the
    featureless types' rows are pulled, and they are those types' input."""
    if embedding is None:
        return
    bare = getattr(batch, "featureless", None)
    if bare is None:
        rows = embedding.pull(batch.n_id.cpu().numpy(), device)
        batch.x = torch.cat([batch.x.float(), rows if train else rows.detach()], dim=1)
        return
    ids = [batch[t].n_id.cpu().numpy() for t in bare]
    rows = embedding.pull(np.concatenate(ids) if ids else np.empty(0, dtype=np.int64), device)
    for t, part in zip(bare, torch.split(rows if train else rows.detach(), [len(i) for i in ids])):
        batch[t].x = part


def _count_correct(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return (pred == labels).sum()  # stays on the device: `_MetricSums` reads it once per epoch


class _MetricSums:
    """Per-step metric sums that cost no device->host transfer per step.

    On the CPU a value is added to the Python float at once (reading a CPU tensor costs nothing, and the sums
    stay exactly as before). On an accelerator a tensor is added into a running tensor on the device, read
    once by `flush` at the end of the pass; plain floats (e.g. an ogb evaluator's count) are added at once.
    """

    def __init__(self, sums: dict[str, float], device: str) -> None:
        self.sums, self.on_host = sums, torch.device(device).type == "cpu"
        self.pending: dict[str, torch.Tensor] = {}

    def add(self, key: str, value: float | torch.Tensor) -> None:
        if self.on_host or not isinstance(value, torch.Tensor):
            self.sums[key] += float(value)
            return
        prev = self.pending.get(key)
        self.pending[key] = value if prev is None else prev + value

    def flush(self) -> dict[str, float]:
        """Add the device sums into `sums` (one read per key per pass) and return `sums`."""
        for key, value in self.pending.items():
            self.sums[key] += value.item()
        self.pending.clear()
        return self.sums


def train_epoch(model: torch.nn.Module, loader: Any, optimizer: torch.optim.Optimizer, *, device: str,
                bf16: bool = False, timer: AllreduceTimer | None = None, progress: bool = False,
                comm: Any = None, stop: Any = None, start_step: int = 0, end_step: int | None = None,
                embedding: Any = None,
                metric: Callable[[torch.Tensor, torch.Tensor], float] | None = None) -> dict[str, float]:
    """Collective over `comm` (when given; every rank runs the same steps): train one epoch.

    Every step, the ranks sum (seeds in this step, stop requested) in one tiny MPI all-reduce (about 10 us on
    2 ranks here). Each rank's loss is the sum of its per-seed losses times world_size / (the step's seeds on
    all ranks): DDP averages gradients over the ranks, so the update is the gradient of the mean loss over
    all the step's seeds, whatever each rank's share. A rank without seeds still runs the forward through
    DDP (on its empty batch) and joins the gradient all-reduce with zeros. When any rank's `stop.requested`
    is set, every rank leaves at the same step, before training it, and `stopped_step` says which.

    Args:
        start_step: skip the steps before it (resume in the middle of an epoch; mpignn's loader, told by
            `set_epoch(epoch, start_step)`, does not even draw them).
        end_step: leave before this step (None: at the loader's end), e.g. to evaluate inside the epoch.
        embedding: a NodeEmbedding whose rows follow the features (collective: pulled and stepped each step).
        metric: counts correct predictions (pred, labels); default: equal labels.
    Returns:
        sums: loss_sum, correct, seeds, steps, compute_s, allreduce_s, and stopped_step (-1: not stopped).
    """
    model.train()
    sums = {"loss_sum": 0.0, "correct": 0.0, "seeds": 0.0, "steps": 0.0, "compute_s": 0.0, "allreduce_s": 0.0,
            "stopped_step": -1.0, "edges": 0.0, "nodes": 0.0}
    reduce_before, agree_s = (timer.seconds if timer else 0.0), 0.0
    world = comm.size if comm is not None else 1
    count = metric or _count_correct
    metric_sums = _MetricSums(sums, device)
    for step, batch in enumerate(loader, start=getattr(loader, "start_step", 0)):
        if step < start_step:  # a loader that cannot start later draws the done steps again
            continue
        if end_step is not None and step >= end_step:  # the same step on every rank: no collective is left
            break
        t0 = time.perf_counter()
        n = batch.edge_label.numel() if "edge_label" in batch else batch.batch_size  # labelled items
        wants_stop = float(stop is not None and stop.requested)
        t_agree = time.perf_counter()
        step_seeds, stops = allreduce_sum(comm, [n, wants_stop]).tolist() if world > 1 else (n, wants_stop)
        agree_s += time.perf_counter() - t_agree
        if stops:
            sums["stopped_step"] = step
            break
        optimizer.zero_grad(set_to_none=True)
        with_rows(batch, embedding, device)
        with autocast(device, bf16):
            logits = forward_batch(model, batch)
        if "edge_label" in batch:  # link prediction: one logit per labelled pair
            labels = batch.edge_label
            loss_sum = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="sum")
        else:
            labels = batch.y[:n]
            loss_sum = F.cross_entropy(logits.float(), labels, reduction="sum")
        loss = loss_sum * (world / max(step_seeds, 1))
        if n:
            pred = (logits > 0).to(labels.dtype) if "edge_label" in batch else logits.argmax(-1)
            metric_sums.add("correct", count(pred, labels))
            metric_sums.add("loss_sum", loss_sum.detach())
            sums["edges"] += getattr(batch, "num_pos", 0)
        else:
            loss = loss + _empty_loss(model)
        loss.backward()
        optimizer.step()
        if embedding is not None:
            embedding.step()  # collective: the rows' gradients to their owners, updated there
        synchronize(device)  # kernels are queued work: the step's compute ends when the device is done
        sums["seeds"] += n
        sums["steps"] += 1
        sums["nodes"] += batch.num_nodes  # the nodes this step computed on (seeds and sampled neighbours)
        sums["compute_s"] += time.perf_counter() - t0
        if progress:  # reading the loss waits for the device: only where the bar is shown (a tty)
            _progress(progress, step + 1, len(loader), float(loss_sum.detach()) / max(n, 1))
    metric_sums.flush()
    # The per-step agreement is a collective too: where a rank waits for a slower one, it waits there.
    sums["allreduce_s"] = (timer.seconds - reduce_before if timer else 0.0) + agree_s
    sums["compute_s"] -= sums["allreduce_s"]
    return sums


@torch.no_grad()
def evaluate_links(model: torch.nn.Module, loader: Any, *, device: str, bf16: bool = False,
                   hits_k: int = 10, embedding: Any = None) -> LinkScores:
    """This rank's scores of its held-out pairs (positives, fixed negatives, K tails each); reduce them with
    `LinkScores.summary` (collective)."""
    model.eval()
    module = getattr(model, "module", model)
    scores = LinkScores(hits_k)
    for batch in loader:
        with_rows(batch, embedding, device, train=False)
        if batch.num_pos:
            with autocast(device, bf16):
                logits = forward_batch(module, batch)
            scores.add(logits.float().cpu().numpy(), batch.edge_label.cpu().numpy(), batch.num_pos,
                       batch.num_tails)
    return scores


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: Any, *, device: str, bf16: bool = False,
             metric: Callable[[torch.Tensor, torch.Tensor], float] | None = None,
             embedding: Any = None) -> dict[str, float]:
    """Accuracy sums over the loader's seeds: correct (counted by `metric`, default equal labels), seeds."""
    model.eval()
    module = getattr(model, "module", model)  # no DDP in evaluation: there are no gradients to sync
    sums = {"correct": 0.0, "seeds": 0.0}
    metric_sums = _MetricSums(sums, device)
    for batch in loader:
        n = batch.batch_size
        with_rows(batch, embedding, device, train=False)  # collective: before skipping an empty batch
        if not n:
            continue
        with autocast(device, bf16):
            logits = forward_batch(module, batch)
        metric_sums.add("correct", (metric or _count_correct)(logits.argmax(-1), batch.y[:n]))
        sums["seeds"] += n
    return metric_sums.flush()


def run_epoch(rt: Any, epoch: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
              loaders: dict[str, Any], *, bf16: bool, timer: AllreduceTimer | None, evaluate_now: bool,
              graph: Any, stop: Any = None, start_step: int = 0, end_step: int | None = None,
              carry: dict[str, float] | None = None, test_if: float | None = None,
              metric: Callable[[torch.Tensor, torch.Tensor], float] | None = None,
              hits_k: int = 10) -> dict[str, Any]:
    """Collective over `rt.comm`: train one epoch (and evaluate val/test on every rank's share when
    `evaluate_now`), then reduce everything into one record (sums divided once; times are the max over
    ranks; memory is the max over ranks).

    Resuming mid-epoch, `start_step` skips the steps done before the stop and `carry` holds their summed
    loss_sum/correct/seeds (over all ranks; rank 0 adds them). When `stop` ends the epoch early (see
    `train_epoch`), nothing is evaluated and the record has `stopped_step` and `partial` (those sums).
    With `end_step` the pass trains steps [start_step, end_step) only (an evaluation inside the epoch); the
    record's `epochs_done` says how far training got (epoch 1 step 50 of 100 -> 1.5). With `test_if`, the
    test split is evaluated only when the validation score reaches it (else the record's test score is None)."""
    from mpignn.report import peak_rss_mb

    features, hops, emb = graph.features, graph.sampler.source, getattr(graph, "embedding", None)
    emb_bytes0 = emb.bytes_received + emb.bytes_sent if emb is not None else 0
    feat_bytes0, hit0, rows0 = features.bytes_received, features.cache_hits, features.remote_rows
    struct0 = getattr(hops, "bytes_received", 0)
    start = time.perf_counter()
    for name, loader in loaders.items():
        if name == "train":
            loader.set_epoch(epoch, start_step, end_step)
        else:
            loader.set_epoch(epoch)
    sums = train_epoch(model, loaders["train"], optimizer, device=rt.device, bf16=bf16, timer=timer,
                       progress=rt.rank == 0 and sys.stderr.isatty(), comm=rt.comm, stop=stop,
                       start_step=start_step, end_step=end_step, embedding=emb, metric=metric)
    if carry and rt.rank == 0:
        for key in ("loss_sum", "correct", "seeds", "edges"):
            sums[key] += carry.get(key, 0.0)
    stopped = sums["stopped_step"] >= 0
    evaluate_now = evaluate_now and not stopped
    train_s = time.perf_counter() - start
    train_peak = peak_rss_mb()  # the process's peak so far: where it rises again below, evaluation raised it
    ev = {"val_correct": 0.0, "val_seeds": 0.0, "test_correct": 0.0, "test_seeds": 0.0}
    links: dict[str, Any] = {}
    test_now = evaluate_now
    if evaluate_now and graph.links is not None:
        for split in ("val", "test"):
            if split == "val" or test_now:
                part = evaluate_links(model, loaders[split], device=rt.device, bf16=bf16, hits_k=hits_k,
                                      embedding=emb)
                links[split] = part.summary(rt.comm)
                test_now = test_if is None or links["val"]["auc"] >= test_if
    elif evaluate_now:
        for split in ("val", "test"):
            if split == "val" or test_now:
                res = evaluate(model, loaders[split], device=rt.device, bf16=bf16, metric=metric, embedding=emb)
                ev[f"{split}_correct"], ev[f"{split}_seeds"] = res["correct"], res["seeds"]
            if split == "val" and test_if is not None:
                correct, seen = allreduce_sum(rt.comm, [res["correct"], res["seeds"]]).tolist()
                test_now = bool(seen) and correct / seen >= test_if
    times = loaders["train"].times
    steps = len(loaders["train"])
    local = {**{k: sums[k] for k in ("loss_sum", "correct", "seeds", "edges", "nodes", "steps")}, **ev,
             "remote_feature_bytes": features.bytes_received - feat_bytes0,
             "remote_structure_bytes": getattr(hops, "bytes_received", 0) - struct0,
             "embedding_bytes": (emb.bytes_received + emb.bytes_sent if emb is not None else 0) - emb_bytes0,
             "cache_hits": features.cache_hits - hit0, "remote_rows": features.remote_rows - rows0}
    keys = sorted(local)
    total = dict(zip(keys, allreduce_sum(rt.comm, [local[k] for k in keys]).tolist()))
    slowest = allreduce_max(rt.comm, [train_s, times.sample_s, times.exchange_s, sums["compute_s"],
                                      sums["allreduce_s"], peak_rss_mb(), graph.load_peak_rss_mb,
                                      times.wait_s, train_peak]).tolist()
    frac = lambda a, b: (total[a] / total[b]) if total[b] else None  # noqa: E731
    rec = {
        "epoch": epoch, "epochs_done": epoch + min(end_step or steps, steps) / max(steps, 1),
        "loss": frac("loss_sum", "seeds") or 0.0, "train_acc": frac("correct", "seeds"),
        "val_acc": frac("val_correct", "val_seeds") if evaluate_now else None,
        "test_acc": frac("test_correct", "test_seeds") if test_now else None,
        "epoch_s": slowest[0], "seeds_per_s": total["seeds"] / slowest[0] if slowest[0] else 0.0,
        "sample_s": slowest[1], "exchange_s": slowest[2], "compute_s": slowest[3], "allreduce_s": slowest[4],
        "wait_s": slowest[7],
        # per rank and step: where a batch is split over ranks, each rank's share of the seeds still reaches
        # more than its share of the nodes (neighbourhoods overlap), which is the work that does not shrink
        "nodes_per_step": total["nodes"] / total["steps"] if total["steps"] else 0.0,
        "remote_feature_bytes": int(total["remote_feature_bytes"]),
        "remote_structure_bytes": int(total["remote_structure_bytes"]),
        "embedding_bytes": int(total["embedding_bytes"]),
        "cache_hit_rate": (total["cache_hits"] / total["remote_rows"]) if total["remote_rows"] else 0.0,
        "cache_rows": graph.cache_rows, "cache_mib": graph.cache_mib, "graph_mib": graph.graph_mib,
        "peak_rss_mb": slowest[5], "load_peak_rss_mb": slowest[6], "train_peak_rss_mb": slowest[8],
        "world_size": rt.world_size,
    }
    if graph.links is not None:  # link prediction: pair metrics in place of the node metrics
        del rec["val_acc"], rec["test_acc"], rec["seeds_per_s"]
        rec["edges_per_s"] = total["edges"] / slowest[0] if slowest[0] else 0.0
        for split in ("val", "test"):
            rec[f"{split}_auc"] = links[split]["auc"] if split in links else None
        rec["test_mrr"] = links["test"]["mrr"] if "test" in links else None
        rec[f"test_hits@{hits_k}"] = links["test"]["hits"] if "test" in links else None
    if stopped:
        rec["stopped_step"] = int(sums["stopped_step"])
        rec["partial"] = {key: total[key] for key in ("loss_sum", "correct", "seeds", "edges")}
    return rec

