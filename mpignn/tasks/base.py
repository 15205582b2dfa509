"""The `Task` interface: everything that differs between graph learning tasks, asked by the one pipeline.

The loader, the epoch loop, `fit`, `runtime` and the partitioner name no task; they call these methods. A new
task is one module with a `Task` subclass plus one line in `mpignn.config.choices.TASKS`.
"""
from __future__ import annotations

from typing import Any, Callable, TYPE_CHECKING

import numpy as np
import torch

from mpignn.tasks.forward import count_equal
from mpignn.errors import ConfigError
from mpignn.mpi import chunk_bounds

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig
    from mpignn.launch.bootstrap import Runtime
    from mpignn.loader.local_graph import LocalGraph

__all__ = ["Task", "Pick", "picker", "EVAL_BATCH_FACTOR"]

EVAL_BATCH_FACTOR = 4
"""Evaluation steps take this many times --batch-size seeds per rank: they run forward only, keeping no
activations for a backward pass, and a larger batch computes the neighbourhood its seeds share once, so an
evaluation costs less (docs/training.md, "Evaluation batches")."""

Pick = Callable[[np.ndarray, int], np.ndarray]
"""`pick(array, axis)`: this rank's share of `array` along `axis` (its ceiling-division share when every rank
holds the whole graph; the array itself otherwise)."""


def picker(replicated: bool, world_size: int, rank: int) -> Pick:
    """The `Pick` of a rank: a part's arrays are its own already; a graph every rank holds is shared out."""
    if not replicated or world_size == 1:
        return lambda array, axis: array
    return lambda array, axis: np.take(array, np.arange(*chunk_bounds(array.shape[axis], world_size, rank)),
                                       axis=axis)


class Task:
    """What a task decides, in the order the pipeline asks: what the partition holds out, which nodes batches
    start from, what a batch carries, the model's head, the loss, the metrics and the record fields.

    Attributes:
        name: the `--task` value.
        metric: the validation score `fit` keeps the best of (record field `val_<metric>`).
        metric_name: that score in words, for the run's last line.
        model_flags: `TrainConfig` fields besides `checkpoint.MODEL_KEYS` that the task's weights' shapes
            depend on: a resume that changes one is refused.
        unit: what the throughput counts (record field `<unit>_per_s`).
        cooperative: whether cooperative mini-batches can train it (its batches are node seeds and its
            forward is the model's): `config.refusals` asks.
        norm, residual, linear_head: the model's `--norm`, `--residual` and `--linear-head`
            (`models.build_model`), set by `from_config`.
    """

    name = ""
    metric = "acc"
    metric_name = "accuracy"
    unit = "seeds"
    cooperative = False
    model_flags: tuple[str, ...] = ()
    norm = "none"
    residual = False
    linear_head = False

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> "Task":
        """The task a `config.train_config.TrainConfig` asks for (its flags are checked already)."""
        return cls().with_model_options(cfg)

    def with_model_options(self, cfg: TrainConfig) -> "Task":
        """This task, building its models with `cfg`'s `--norm`, `--residual` and `--linear-head`."""
        self.norm, self.residual, self.linear_head = cfg.norm, cfg.residual, cfg.linear_head
        return self

    # --- data ------------------------------------------------------------------------------------------------
    def partition_extras(self) -> dict[str, Any] | None:
        """What the partitioner holds out of the graph before cutting it (`GraphOptions.link_params`); None: nothing."""
        return None

    def check_graph(self, schema: Any) -> None:
        """Raise ConfigError for a graph the task cannot run on (`schema`: a heterogeneous graph's, or None)."""

    def cache_seeds(self, part: Any) -> np.ndarray:
        """Global ids of the own nodes training batches start from: the remote-row cache is filled around them."""
        return part.train_idx

    def local_data(self, part: Any, held_out: dict[str, np.ndarray] | None) -> dict[str, np.ndarray] | None:
        """This rank's arrays of the task (`LocalGraph.task_data`), from its part and its share of what the
        partition held out (`partition_extras`; None when nothing was)."""
        return held_out

    def seeds(self, graph: LocalGraph, split: str, pick: Pick) -> Any:
        """This rank's seed source of `split` ("train", "val", "test") for `loader.batches.BatchLoader`: node ids, or an
        object with `__len__`, `draw(sampler, items, seed)` and `attach(data, extra)`."""
        raise NotImplementedError

    eval_factor = EVAL_BATCH_FACTOR
    """An evaluation step's items (the nodes its seeds bring) by default: this many times --batch-size."""

    def eval_batch_size(self, seeds: Any, items: int) -> int:
        """Seeds per evaluation step holding about `items` items (a task whose seeds bring several makes it
        smaller)."""
        return items

    # --- model and loss --------------------------------------------------------------------------------------
    def build_model(self, name: str, graph: LocalGraph, hidden: int, num_layers: int, dropout: float) -> torch.nn.Module:
        raise NotImplementedError

    def forward(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        """The logits the loss reads, of the batch's labelled items."""
        raise NotImplementedError

    def items(self, batch: Any) -> int:
        """The batch's labelled items: the loss is their sum, averaged over all ranks' items of the step."""
        return batch.batch_size

    def units(self, batch: Any) -> int:
        """What the batch adds to the throughput count (`unit`)."""
        return self.items(batch)

    def loss(self, logits: torch.Tensor, batch: Any, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(summed loss, predictions, labels) of the batch's `n` labelled items."""
        raise NotImplementedError

    def count_correct(self, pred: torch.Tensor, labels: torch.Tensor) -> Any:
        """Correct predictions among `pred` (a tensor on the device, or a float)."""
        return count_equal(pred, labels)

    # --- evaluation and the record ---------------------------------------------------------------------------
    def evaluate(self, rt: Runtime, model: torch.nn.Module, loaders: dict[str, Any], *, now: bool, bf16: bool,
                 embedding: Any, test_if: float | None) -> dict[str, Any]:
        """Collective over `rt.comm` when `now`: the record's score fields (`val_<metric>`, `test_<metric>` and
        any others), reduced over the ranks; None where a split was not scored (not `now`, or the validation
        score below `test_if` for the test split)."""
        raise NotImplementedError

    def describe(self, rec: dict[str, Any]) -> str:
        """The scores of an epoch record as the epoch line prints them."""
        raise NotImplementedError

    def evaluate_exact(self, rt: Runtime, graph: LocalGraph, model: torch.nn.Module, *, chunk: int = 8192) -> dict[str, Any]:
        """Collective over `rt.comm`: the val/test scores of exact inference (`--eval exact`: every layer over
        whole neighbourhoods, `inference.layerwise`), as the record's `<split>_<metric>` fields.

        Raises:
            ConfigError: the task has no exact evaluation.
        """
        raise ConfigError(f"--eval exact expects a task with exact evaluation; --task {self.name} has none "
                          "yet. HINT: --eval sampled, and python -m mpignn.predict for its embeddings")

    # --- prediction (`python -m mpignn.predict`) ---------------------------------------------------------------
    def encoder(self, model: torch.nn.Module) -> torch.nn.Module:
        """The node encoder inside `model` whose layers exact inference applies one at a time."""
        return model

    def emb_layer(self, num_layers: int) -> int:
        """The layer whose output rows `emb` holds by default (0: the input rows; `num_layers`: the last)."""
        return num_layers - 1

    def predict_fields(self, out: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-node fields of the encoder's last-layer rows `out` written beside them (e.g. a class)."""
        return {}

    def score_pairs(self, model: torch.nn.Module, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """One score per pair from the encoder's rows of its two ends (`a`, `b`: [P, D]).

        Raises:
            ConfigError: the task has no pair decoder.
        """
        raise ConfigError(f"--pairs expects a checkpoint of a task that scores node pairs (--task link); this one "
                          f"was trained with --task {self.name}. HINT: drop --pairs, or predict with a link "
                          "prediction checkpoint")
