"""The `Task` interface: everything that differs between graph learning tasks, so the pipeline names no task
(a new task: a `Task` subclass plus a line in `config.choices.TASKS`). Beside it, what every task's forward pass
shares: bf16 autocast, the batch's learnable rows, and metric sums that cost no device->host read per step."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, TYPE_CHECKING

import numpy as np
import torch

from mpignn.errors import ConfigError
from mpignn.mpi import chunk_bounds

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig
    from mpignn.launch.bootstrap import Runtime
    from mpignn.loader.local_graph import LocalGraph

__all__ = ["Task", "Pick", "picker", "EVAL_BATCH_FACTOR", "autocast", "with_rows", "MetricSums", "empty_loss",
           "count_equal"]

EVAL_BATCH_FACTOR = 4
"""Evaluation steps take this many times --batch-size seeds per rank: forward only, and a larger batch computes a
shared neighbourhood once (docs/training.md, "Evaluation batches")."""

Pick = Callable[[np.ndarray, int], np.ndarray]
"""`pick(array, axis)`: this rank's share of `array` along `axis` (the whole array where the graph is partitioned)."""


def picker(replicated: bool, world_size: int, rank: int) -> Pick:
    """Return a rank's `Pick`: a part's arrays are its own already; a replicated graph is shared out."""
    if not replicated or world_size == 1:
        return lambda array, axis: array
    return lambda array, axis: np.take(array, np.arange(*chunk_bounds(array.shape[axis], world_size, rank)),
                                       axis=axis)


class Task:
    """What a task decides, in the order the pipeline asks (data, model and loss, evaluation, prediction)."""

    name = ""  # the --task value
    metric = "acc"  # the validation score `fit` keeps the best of (record field `val_<metric>`)
    metric_name = "accuracy"  # that score in words, for the run's last line
    unit = "seeds"  # what the throughput counts (record field `<unit>_per_s`)
    cooperative = False  # whether cooperative mini-batches can train it (`config.refusals` asks)
    model_flags: tuple[str, ...] = ()  # fields besides `checkpoint.MODEL_KEYS` the weights' shapes depend on
    norm = "none"  # norm, residual, linear_head: the model's options, set by `from_config`
    residual = False
    linear_head = False

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> "Task":
        """Return the task `cfg` asks for (its flags are checked already)."""
        return cls().with_model_options(cfg)

    def with_model_options(self, cfg: TrainConfig) -> "Task":
        """Build models with `cfg`'s `--norm`, `--residual` and `--linear-head`; return self."""
        self.norm, self.residual, self.linear_head = cfg.norm, cfg.residual, cfg.linear_head
        return self

    # --- data ------------------------------------------------------------------------------------------------
    def partition_extras(self) -> dict[str, Any] | None:
        """Return what the partitioner holds out before cutting (`GraphOptions.link_params`); None: nothing."""
        return None

    def check_graph(self, schema: Any) -> None:
        """Raise ConfigError for a graph the task cannot run on (`schema`: a heterogeneous graph's, or None)."""

    def cache_seeds(self, part: Any) -> np.ndarray:
        """Return the own nodes training batches start from: the remote-row cache is filled around them."""
        return part.train_idx

    def local_data(self, part: Any, held_out: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
        """Return this rank's task arrays (`LocalGraph.task_data`) from its part and its held-out share."""
        return held_out

    def seeds(self, graph: LocalGraph, split: str, pick: Pick) -> Any:
        """Return this rank's seeds of `split` for `BatchLoader`: node ids, or an object with `__len__`,
        `draw(sampler, items, seed)` and `attach(data, extra)`."""
        raise NotImplementedError

    eval_factor = EVAL_BATCH_FACTOR
    """An evaluation step's items (the nodes its seeds bring) by default: this many times --batch-size."""

    def eval_batch_size(self, seeds: Any, items: int) -> int:
        """Return seeds per evaluation step holding about `items` items (fewer where a seed brings several)."""
        return items

    # --- model and loss --------------------------------------------------------------------------------------
    def build_model(self, name: str, graph: LocalGraph, hidden: int, num_layers: int, dropout: float) -> torch.nn.Module:
        raise NotImplementedError

    def forward(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        """Return the logits of the batch's labelled items."""
        raise NotImplementedError

    def items(self, batch: Any) -> int:
        """Return the batch's labelled items: the loss sums them, averaged over all ranks' items of the step."""
        return batch.batch_size

    def units(self, batch: Any) -> int:
        """Return what the batch adds to the throughput count (`unit`)."""
        return self.items(batch)

    def loss(self, logits: torch.Tensor, batch: Any, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return (summed loss, predictions, labels) of the batch's `n` labelled items."""
        raise NotImplementedError

    def count_correct(self, pred: torch.Tensor, labels: torch.Tensor) -> Any:
        """Count correct predictions (a tensor on the device, or a float)."""
        return count_equal(pred, labels)

    # --- evaluation and the record ---------------------------------------------------------------------------
    def evaluate(self, rt: Runtime, model: torch.nn.Module, loaders: dict[str, Any], *, now: bool, bf16: bool,
                 embedding: Any, test_if: float | None) -> dict[str, Any]:
        """Collective over `rt.comm` when `now`: return the record's score fields, reduced over the ranks; None
        where a split was not scored (not `now`, or validation below `test_if` for test)."""
        raise NotImplementedError

    def describe(self, rec: dict[str, Any]) -> str:
        """Return the scores of an epoch record as the epoch line prints them."""
        raise NotImplementedError

    def evaluate_exact(self, rt: Runtime, graph: LocalGraph, model: torch.nn.Module, *, chunk: int = 8192) -> dict[str, Any]:
        """Collective over `rt.comm`: return exact inference's val/test scores (`--eval exact`) as record fields;
        ConfigError where the task has none."""
        raise ConfigError(f"--eval exact expects a task with exact evaluation; --task {self.name} has none "
                          "yet. HINT: --eval sampled, and python -m mpignn.predict for its embeddings")

    # --- prediction (`python -m mpignn.predict`) ---------------------------------------------------------------
    def encoder(self, model: torch.nn.Module) -> torch.nn.Module:
        """Return the node encoder inside `model` whose layers exact inference applies one at a time."""
        return model

    def emb_layer(self, num_layers: int) -> int:
        """Return the layer whose output `emb` holds by default (0: the input rows; `num_layers`: the last)."""
        return num_layers - 1

    def predict_fields(self, out: torch.Tensor) -> dict[str, torch.Tensor]:
        """Return per-node fields written beside the encoder's last-layer rows `out` (e.g. a class)."""
        return {}

    def score_pairs(self, model: torch.nn.Module, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Return one score per pair from the encoder's rows of its two ends (`a`, `b`: [P, D]); ConfigError where
        the task has no pair decoder."""
        raise ConfigError(f"--pairs expects a checkpoint of a task that scores node pairs (--task link); this one "
                          f"was trained with --task {self.name}. HINT: drop --pairs, or predict with a link "
                          "prediction checkpoint")


def autocast(device: str, bf16: bool) -> contextlib.AbstractContextManager:
    if not bf16:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def empty_loss(model: torch.nn.Module) -> torch.Tensor:
    """A zero loss touching every parameter: a rank with no seeds still joins DDP's all-reduce."""
    return sum(p.sum() * 0.0 for p in model.parameters())  # type: ignore[return-value]


def count_equal(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Count correct predictions, on the device (`MetricSums` reads it once per pass)."""
    return (pred == labels).sum()


def with_rows(batch: Any, embedding: Any, device: str, train: bool = True) -> None:
    """Collective when `embedding` is given (every rank, every batch, empty ones too): append the batch nodes'
    learnable rows to `batch.x` (a heterogeneous batch's featureless types: as their input)."""
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


class MetricSums:
    """Per-step metric sums that cost no device->host transfer per step: on an accelerator tensors add up on
    the device until `flush`; on the CPU (reading costs nothing) they are added at once."""

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
        """Add the device sums into `sums` (one read per key) and return `sums`."""
        for key, value in self.pending.items():
            self.sums[key] += value.item()
        self.pending.clear()
        return self.sums
