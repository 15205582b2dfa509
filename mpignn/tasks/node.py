"""Node classification: seeds are the split's labelled nodes, the head is the model's last layer into the
classes, the loss is cross-entropy, the score accuracy (counted by ogb's Evaluator for ogbn-* datasets)."""
from __future__ import annotations

from typing import Any, Callable, TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from mpignn.models import build_model, forward_batch
from mpignn.mpi import allreduce_sum
from mpignn.inference.layerwise import exact_outputs
from mpignn.tasks.base import MetricSums, Pick, Task, autocast, count_equal, with_rows

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig
    from mpignn.launch.bootstrap import Runtime
    from mpignn.loader.local_graph import LocalGraph

__all__ = ["NodeTask", "evaluate_nodes"]


class NodeTask(Task):
    name = "node"
    cooperative = True  # metric, metric_name and unit: the `Task` defaults (acc, accuracy, seeds)

    def __init__(self, counter: Callable[[torch.Tensor, torch.Tensor], Any] | None = None) -> None:
        self.counter = counter or count_equal

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> "NodeTask":
        return cls(correct_counter(cfg.dataset)).with_model_options(cfg)

    def seeds(self, graph: LocalGraph, split: str, pick: Pick) -> Any:
        return pick(getattr(graph.part, f"{split}_idx"), 0)

    def build_model(self, name: str, graph: LocalGraph, hidden: int, num_layers: int, dropout: float) -> torch.nn.Module:
        return build_model(name, graph.in_channels(), hidden, graph.num_classes, num_layers, dropout,
                           schema=graph.schema, norm=self.norm, residual=self.residual,
                           linear_head=self.linear_head)

    def forward(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        return forward_batch(model, batch)

    def loss(self, logits: torch.Tensor, batch: Any, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        labels = batch.y[:n]
        return F.cross_entropy(logits.float(), labels, reduction="sum"), logits.argmax(-1), labels

    def count_correct(self, pred: torch.Tensor, labels: torch.Tensor) -> Any:
        return self.counter(pred, labels)

    def evaluate(self, rt: Runtime, model: torch.nn.Module, loaders: dict[str, Any], *, now: bool, bf16: bool,
                 embedding: Any, test_if: float | None) -> dict[str, Any]:
        scores: dict[str, Any] = {"val_acc": None, "test_acc": None}
        for split in ("val", "test") if now else ():
            val = scores["val_acc"]
            if split == "test" and test_if is not None and (val is None or val < test_if):
                break
            sums = evaluate_nodes(model, loaders[split], device=rt.device, bf16=bf16, metric=self.counter,
                                  embedding=embedding)
            correct, seen = allreduce_sum(rt.comm, [sums["correct"], sums["seeds"]]).tolist()
            scores[f"{split}_acc"] = correct / seen if seen else None
        return scores

    def predict_fields(self, out: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"pred": out.argmax(-1)}  # the class, as evaluation counts it

    def evaluate_exact(self, rt: Runtime, graph: LocalGraph, model: torch.nn.Module, *, chunk: int = 8192) -> dict[str, Any]:
        module = getattr(model, "module", model)
        logits, comm, _ = exact_outputs(rt, graph, self.encoder(module), chunk=chunk)
        part = graph.part
        pred, labels = torch.from_numpy(logits).argmax(-1), torch.from_numpy(np.asarray(part.y))
        sums = []
        for split in ("val", "test"):
            idx = torch.from_numpy(np.asarray(getattr(part, f"{split}_idx"), dtype=np.int64) - part.lo)
            sums += [float(self.counter(pred[idx], labels[idx])), len(idx)]
        vc, vs, tc, ts = allreduce_sum(comm, sums).tolist() if comm is not None else sums
        return {"val_acc": vc / vs if vs else None, "test_acc": tc / ts if ts else None}

    def describe(self, rec: dict[str, Any]) -> str:
        acc = lambda v: "  -  " if v is None else f"{v:.4f}"  # noqa: E731
        return f"acc train {acc(rec['train_acc'])} val {acc(rec['val_acc'])} test {acc(rec['test_acc'])}"


@torch.no_grad()
def evaluate_nodes(model: torch.nn.Module, loader: Any, *, device: str, bf16: bool = False,
                   metric: Callable[[torch.Tensor, torch.Tensor], Any] | None = None,
                   embedding: Any = None) -> dict[str, float]:
    """Return this rank's sums {"correct", "seeds"}. Collective only through `embedding` (every batch pulls)."""
    model.eval()
    module = getattr(model, "module", model)  # no DDP in evaluation: there are no gradients to sync
    sums = {"correct": 0.0, "seeds": 0.0}
    metric_sums = MetricSums(sums, device)
    for batch in loader:
        n = batch.batch_size
        with_rows(batch, embedding, device, train=False)  # collective: before skipping an empty batch
        if not n and getattr(batch, "halo", None) is None:  # a halo's layers are collective: every rank computes
            continue
        with autocast(device, bf16):
            logits = forward_batch(module, batch)
        if n:
            metric_sums.add("correct", (metric or count_equal)(logits.argmax(-1), batch.y[:n]))
        sums["seeds"] += n
    return metric_sums.flush()


def correct_counter(dataset: str) -> Callable[[Any, Any], Any]:
    """Return a per-batch count of right predictions: ogb's `Evaluator` for `ogbn-*` (its accuracy times the
    batch size, rounded, so sums stay exact), else equal labels counted on the device (no wait per step)."""
    if not dataset.startswith("ogbn-"):
        return count_equal
    from ogb.nodeproppred import Evaluator

    evaluator = Evaluator(dataset)

    def count(pred: Any, labels: Any) -> float:
        n = len(labels)
        if not n:
            return 0.0
        acc = evaluator.eval({"y_true": labels.reshape(-1, 1), "y_pred": pred.reshape(-1, 1)})["acc"]
        return float(round(acc * n))

    return count
