"""The epoch record (`training.record`) printed as a line on rank 0 and appended as JSON; the
best-validation-epoch selection and the final line."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from mpignn.training.record import BEST_FIELDS, FIELDS

__all__ = ["format_epoch", "append_jsonl", "FIELDS", "BEST_FIELDS", "BestEpoch", "format_final"]


def format_epoch(rec: dict[str, Any], scores: str, unit: str = "seeds") -> str:
    """Return the epoch line; `scores` as `Task.describe` words them."""
    where = f"epoch {rec['epoch']:3d}" + (f" step {rec['step']}" if "step" in rec else "")
    evaluated = f" eval {rec['eval_s']:.2f}s" if rec.get("eval_s") else ""
    return (f"{where} | loss {rec['loss']:.4f} | {scores} | {rec['epoch_s']:.2f}s {rec[f'{unit}_per_s']:.0f} "
            f"{unit}/s{evaluated} | sample {rec['sample_s']:.2f} exch {rec['exchange_s']:.2f} "
            f"compute {rec['compute_s']:.2f} "
            f"allreduce {rec['allreduce_s']:.2f} wait {rec['wait_s']:.2f} | remote "
            f"{rec['remote_feature_bytes'] / 2**20:.1f}+{rec['remote_structure_bytes'] / 2**20:.1f} MiB "
            + (f"rows {rec['embedding_bytes'] / 2**20:.1f} MiB " if rec.get("embedding_bytes") else "")
            + f"cache hit {rec['cache_hit_rate']:.2f} "
            + (f"recent {rec['recent_hit_rate']:.2f} " if rec.get("recent_hit_rate") else "") + "| "
            + (f"input {rec['rows_per_step'][0]:,.0f} rows/step " if rec.get("rows_per_step") else "")
            + (f"redundancy {rec['redundancy']:.2f} " if rec.get("redundancy") is not None else "")
            + (f"halo {rec['halo_step_bytes'] / 2**20:.1f} MiB/step " if rec.get("halo_step_bytes") else "")
            + f"| peak {rec['peak_rss_mb']:.0f} MiB")


def append_jsonl(path: str, rec: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")


@dataclass
class BestEpoch:
    """The evaluated epoch with the best validation `metric` (the earliest on ties) and its test score: what
    the OGB protocol reports, not the last epoch's."""

    epoch: int = -1
    val_acc: float | None = None  # the best validation score (of `metric`, despite the name)
    test_acc: float | None = None
    metric: str = "acc"

    def update(self, rec: dict[str, Any]) -> bool:
        """Take `rec` if it was evaluated and beats the best validation score; return whether it did."""
        val = rec.get(f"val_{self.metric}")
        if val is None or (self.val_acc is not None and val <= self.val_acc):
            return False
        self.epoch, self.val_acc, self.test_acc = int(rec["epoch"]), float(val), rec.get(f"test_{self.metric}")
        return True

    def fields(self) -> dict[str, Any]:
        """Return the record fields best_epoch, best_val_<metric>, test_<metric>_at_best_val."""
        names = (BEST_FIELDS[0], f"best_val_{self.metric}", f"test_{self.metric}_at_best_val")
        return dict(zip(names, (self.epoch if self.val_acc is not None else None, self.val_acc, self.test_acc)))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], metric: str = "acc") -> "BestEpoch":
        return cls(**{"metric": metric, **{k: values[k] for k in ("epoch", "val_acc", "test_acc", "metric")
                                           if k in values}})


def format_final(best: BestEpoch, last: dict[str, Any], world_size: int, name: str = "",
                 exact_eval: bool = False) -> str:
    """Return the run's last line: the test score at the best validation epoch, and how it was evaluated."""
    name = name or {"acc": "accuracy", "auc": "AUC"}.get(best.metric, best.metric)
    scope = ("exact inference (whole neighbourhoods)" if exact_eval else
             "whole neighbourhoods" if last.get("minibatch") == "full" else "sampled neighbourhoods")
    return _final(best, last, world_size, name) + f", {scope}"


def _final(best: BestEpoch, last: dict[str, Any], world_size: int, name: str) -> str:
    last_test = last.get(f"test_{best.metric}") or 0.0
    if best.val_acc is None or best.test_acc is None:
        return f"final test {name} {last_test:.4f} (no validation {name}: last epoch) ({world_size} ranks)"
    return (f"final test {name} {best.test_acc:.4f} at best val epoch {best.epoch} (val {best.val_acc:.4f}; "
            f"last epoch test {last_test:.4f}) ({world_size} ranks)")
