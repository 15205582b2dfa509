"""TensorBoard scalars of the epoch records (`--tensorboard DIR`): rank 0 appends one event per record to an
event file of its own, opened and closed around each write (no thread, nothing left buffered at a crash).
Stdlib plus the optional `tensorboard` package (imported inside functions); must not import torch or MPI.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Any

from mpignn.errors import ConfigError

__all__ = ["require", "scalar_tags", "eval_index", "ScalarLog"]

HINT = "pip install mpignn[tensorboard]"


def require() -> None:
    """Import the optional `tensorboard` package (not collective: every rank checks its own install).

    Raises:
        ConfigError: one line naming the extra to install.
    """
    try:
        from tensorboard.compat.proto import event_pb2  # noqa: F401
        from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"--tensorboard expects the tensorboard package; got ImportError ({exc}). "
                          f"HINT: {HINT}, or drop --tensorboard") from None


def _group(name: str) -> str:
    """The TensorBoard section of a record field, from its name (unit suffixes and score names)."""
    if name == "loss":
        return "loss"
    if name.endswith(("_acc", "_auc", "_mrr", "_at_best_val")) or "hits@" in name or name.startswith("best_"):
        return "score"
    if name.endswith("_per_s"):
        return "throughput"
    if name.endswith("_s"):
        return "time"
    if name.endswith("_bytes"):
        return "bytes"
    if name.endswith(("_mb", "_mib")):
        return "memory"
    return "run"


def scalar_tags(rec: dict[str, Any]) -> dict[str, float]:
    """Every numeric field of an epoch record as {"<section>/<field>": value}; None (not evaluated), bools,
    strings and nested values are left out."""
    return {f"{_group(k)}/{k}": float(v) for k, v in rec.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def eval_index(epoch: int, ends: list[int], end: int) -> int:
    """The TensorBoard step of the evaluation after train step `end` of `epoch`: epochs done times the
    evaluations per epoch (epoch + 1 with one per epoch), so each evaluation inside an epoch has its own step
    and a resumed run continues the same numbering."""
    return epoch * len(ends) + ends.index(end) + 1


class ScalarLog:
    """One event file in `logdir` (created), named like TensorBoard's own (`events.out.tfevents.*`), so
    `tensorboard --logdir DIR` and `EventAccumulator` find it; a resumed run adds a file beside it."""

    def __init__(self, logdir: str) -> None:
        require()
        from tensorboard.compat.proto import event_pb2

        os.makedirs(logdir, exist_ok=True)
        self.path = os.path.join(logdir, f"events.out.tfevents.{time.time():.6f}.{socket.gethostname()}."
                                         f"{os.getpid()}.mpignn")
        self._append(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def write(self, rec: dict[str, Any], step: int) -> None:
        """Append the record's scalars as one event at `step`."""
        from tensorboard.compat.proto import event_pb2, summary_pb2

        values = [summary_pb2.Summary.Value(tag=tag, simple_value=v) for tag, v in scalar_tags(rec).items()]
        self._append(event_pb2.Event(wall_time=time.time(), step=int(step),
                                     summary=summary_pb2.Summary(value=values)))

    def _append(self, event: Any) -> None:
        from tensorboard.summary.writer.record_writer import RecordWriter

        with open(self.path, "ab") as f:
            RecordWriter(f).write(event.SerializeToString())
