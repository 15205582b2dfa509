"""TensorBoard scalars of the epoch records (`--tensorboard DIR`), flushed after each (nothing buffered at a
crash). `tensorboard` and torch are imported inside functions: config checks the install without torch.
"""
from __future__ import annotations

from typing import Any

from mpignn.errors import ConfigError

__all__ = ["require", "ScalarLog"]


def require() -> None:
    """Import the optional `tensorboard` package, or raise a one-line ConfigError naming the extra to install.
    Not collective: every rank checks its own install."""
    try:
        import tensorboard  # noqa: F401  (torch.utils.tensorboard needs it)
    except ImportError as exc:
        raise ConfigError(f"--tensorboard expects the tensorboard package; got ImportError ({exc}). "
                          "HINT: pip install mpignn[tensorboard], or drop --tensorboard") from None


_GROUPS = (("score", ("_acc", "_auc", "_mrr", "_at_best_val")), ("throughput", ("_per_s",)), ("time", ("_s",)),
           ("bytes", ("_bytes",)), ("memory", ("_mb", "_mib")))
"""Sections by the field's ending, the first that matches ("loss", the hits@K and best_ fields aside)."""


def _group(name: str) -> str:
    if name == "loss":
        return "loss"
    if "hits@" in name or name.startswith("best_"):
        return "score"
    return next((group for group, endings in _GROUPS if name.endswith(endings)), "run")


class ScalarLog:
    """Torch's `SummaryWriter` on `logdir`; a resumed run adds an event file beside the first."""

    def __init__(self, logdir: str) -> None:
        require()
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(logdir)

    def write(self, rec: dict[str, Any], step: int) -> None:
        """Write the record's numeric fields (no None, bools or nested values) as "<section>/<field>" at `step`,
        on disk when this returns."""
        for k, v in rec.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self._writer.add_scalar(f"{_group(k)}/{k}", float(v), global_step=int(step))
        self._writer.flush()
