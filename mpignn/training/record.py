"""The epoch record (a plain dict: metrics JSONL, epoch line, TensorBoard): its fields documented once
(`SCHEMA`), built (`epoch_record`), printed on rank 0 and appended as JSON; the best-epoch choice and the final
line. Stdlib only."""
from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

__all__ = ["Field", "SCHEMA", "BEST_FIELDS", "MEASURED", "epoch_record", "redundancy", "repeatable", "format_epoch",
           "append_jsonl", "BestEpoch", "format_final"]


@dataclass(frozen=True)
class Field:
    """One key of the epoch record."""

    unit: str
    """What the number counts ("" for a ratio, a name or an index)."""
    meaning: str
    filled_by: str
    """The module that puts it into the record."""


_EPOCH, _FIT, _TASK = "training.record (from training.epoch)", "training.fit", "tasks (Task.evaluate)"
_SLOW = "the slowest rank's"

SCHEMA: dict[str, Field] = {
    "epoch": Field("", "0-based epoch index", _EPOCH),
    "epochs_done": Field("epochs", "training done at this record (epoch 1, step 50 of 100 -> 1.5)", _EPOCH),
    "step": Field("steps", "only for an evaluation inside an epoch (--evals-per-epoch): the steps trained so far",
                  _FIT),
    "loss": Field("", "mean training loss over the epoch's labelled items on all ranks (sums divided once)", _EPOCH),
    "train_acc": Field("", "share of the epoch's training items predicted right, on all ranks", _EPOCH),
    "<split>_<metric>": Field("", "val/test score of sampled neighbourhoods (acc; auc, and test_mrr for links; "
                              "of exact inference with --eval exact); None when not evaluated this time", _TASK),
    "test_hits@K": Field("", "--task link: share of held-out edges ranked in the top K of their negatives", _TASK),
    "<unit>_per_s": Field("items/s", "training throughput: seeds (nodes) or positive edges per second, all ranks",
                          _EPOCH),
    "epoch_s": Field("s", f"{_SLOW} training time of the epoch (evaluation excluded)", _EPOCH),
    "eval_s": Field("s", f"{_SLOW} time evaluating the validation and test splits after it (0.0: none; "
                    "--eval exact's exact inference included)", _EPOCH),
    "sample_s": Field("s", f"{_SLOW} time in sampling (the loader's)", _EPOCH),
    "exchange_s": Field("s", f"{_SLOW} time fetching remote features and structure", _EPOCH),
    "compute_s": Field("s", f"{_SLOW} forward + backward + optimizer time, all-reduce excluded", _EPOCH),
    "allreduce_s": Field("s", f"{_SLOW} time in the gradient all-reduce and the per-step agreement", _EPOCH),
    "wait_s": Field("s", f"{_SLOW} time the training thread waited for its next batch", _EPOCH),
    "nodes_per_step": Field("nodes", "nodes one step of one rank computed on (seeds and sampled neighbours), "
                            "mean", _EPOCH),
    "remote_feature_bytes": Field("bytes", "feature rows received from their owners, all ranks", _EPOCH),
    "remote_structure_bytes": Field("bytes", "adjacency received from its owners while sampling, all ranks",
                                    _EPOCH),
    "embedding_bytes": Field("bytes", "learnable rows (--embed-dim) sent and received, all ranks", _EPOCH),
    "cache_hit_rate": Field("", "share of remote rows served by the feature cache", _EPOCH),
    "recent_hit_rate": Field("", "share of remote rows a recent batch brought (--batch-dependency; cooperative: of the"
                             " input layer's)", _EPOCH),
    "cache_rows": Field("rows", "remote feature rows cached, the most on any rank", "runtime.graph"),
    "cache_mib": Field("MiB", "their memory, the most on any rank", "runtime.graph"),
    "graph_mib": Field("MiB", "memory that depends on the graph (part arrays, sampler scratch, cache, learnable "
                       "rows), the most on any rank", "runtime.graph"),
    "peak_rss_mb": Field("MiB", "process peak resident memory so far, the most on any rank (read before --eval "
                         "exact's exact inference, whose peak the next record shows)", _EPOCH),
    "load_peak_rss_mb": Field("MiB", "peak resident memory by the end of start-up, the most on any rank",
                              "runtime.graph"),
    "train_peak_rss_mb": Field("MiB", "peak resident memory by the end of training (before evaluation)", _EPOCH),
    "rss_mb": Field("MiB", "resident memory at the epoch's end (grows only with memory kept)", _EPOCH),
    "world_size": Field("ranks", "ranks in the job", _EPOCH),
    "rows_per_step": Field("rows", "rows computed per layer (0: input rows) in one step of all ranks", _EPOCH),
    "own_rows_per_step": Field("rows", "the same on the busiest rank", _EPOCH),
    "redundancy": Field("", "rows computed on all ranks / rows of the union of their batches, the largest over "
                        "the layers (1.0: each row once; `redundancy`)", _EPOCH),
    "halo_step_bytes": Field("bytes", "--minibatch cooperative and full: layer rows and their gradients moved per step",
                             _EPOCH),
    "minibatch": Field("", "how the batch was split over ranks: independent, cooperative or full", _EPOCH),
    "resolved": Field("", "what each flag left to the run (auto, or 0 for threads and --eval-batch-size) resolved to, "
                      "{flag: value}: given as flags, they repeat the run (docs/reproducibility.md)", _FIT),
    "stopped_step": Field("steps", "only when a signal stopped the epoch: the first step not trained", _EPOCH),
    "partial": Field("", "only when stopped: the done steps' sums a resumed run adds back", _EPOCH),
    "best_epoch": Field("", "the evaluated epoch with the best validation score so far", _FIT),
    "best_val_<metric>": Field("", "that validation score", _FIT),
    "test_<metric>_at_best_val": Field("", "the test score at that epoch (what the OGB protocol reports)", _FIT),
}

BEST_FIELDS = ("best_epoch", "best_val_acc", "test_acc_at_best_val")

MEASURED = frozenset({"epoch_s", "eval_s", "sample_s", "exchange_s", "compute_s", "allreduce_s", "wait_s",
                      "peak_rss_mb", "load_peak_rss_mb", "train_peak_rss_mb", "rss_mb"})
"""The fields a run of the same command may change (times and memory; the `<unit>_per_s` rates too)."""


def repeatable(rec: Mapping[str, Any]) -> dict[str, Any]:
    """Return `rec` without `MEASURED` and the rates: what the same command repeats (docs/reproducibility.md)."""
    return {k: v for k, v in rec.items() if k not in MEASURED and not k.endswith("_per_s")}


def redundancy(counted: Sequence[float], union: Sequence[float]) -> float | None:
    """Return the largest per-layer rows computed on all ranks / rows of their union (1.0: each row once), or None."""
    shares = [c / u for c, u in zip(counted, union) if u]
    return max(shares) if shares else None


def epoch_record(*, epoch: int, epochs_done: float, total: Mapping[str, float], slowest: Mapping[str, Any],
                 scores: Mapping[str, Any], unit: str, layers: int, world_size: int, graph_fields: Mapping[str, float],
                 minibatch: str, stopped_step: int | None = None, carried: Sequence[str] = ()) -> dict[str, Any]:
    """Build the record of one epoch from `total` (sums over ranks: the epoch's, rows per layer, `epoch.COUNTERS`)
    and `slowest` (maxima over ranks: times, memory, the busiest rank's own_rows); with `stopped_step`, the
    `carried` sums are kept as `partial` for a resumed run."""
    frac = lambda a, b: (total[a] / total[b]) if total[b] else None  # noqa: E731
    steps_all = max(total["steps"] / world_size, 1)
    rec: dict[str, Any] = {
        "epoch": epoch, "epochs_done": epochs_done,
        "loss": frac("loss_sum", "seeds") or 0.0, "train_acc": frac("correct", "seeds"), **scores,
        "epoch_s": slowest["epoch_s"],
        f"{unit}_per_s": total["units"] / slowest["epoch_s"] if slowest["epoch_s"] else 0.0,
        **{k: slowest[k] for k in ("eval_s", "sample_s", "exchange_s", "compute_s", "allreduce_s", "wait_s")},
        "nodes_per_step": total["nodes"] / total["steps"] if total["steps"] else 0.0,
        **{k: int(total[k]) for k in ("remote_feature_bytes", "remote_structure_bytes", "embedding_bytes")},
        "cache_hit_rate": (total["cache_hits"] / total["remote_rows"]) if total["remote_rows"] else 0.0,
        # of a cooperative batch's input layer where it keeps them, else of the rows the feature store was asked for
        "recent_hit_rate": (total["kept_rows"] / total["input_rows"] if total.get("input_rows") else
                            total.get("recent_hits", 0) / total["remote_rows"] if total["remote_rows"] else 0.0),
        **graph_fields,
        **{k: slowest[k] for k in ("peak_rss_mb", "load_peak_rss_mb", "train_peak_rss_mb")},
        "rss_mb": slowest["rss_mb"] or None, "world_size": world_size,
        "rows_per_step": [round(total[f"rows_{j}"] / steps_all, 1) for j in range(layers)],
        "own_rows_per_step": [round(v, 1) for v in slowest["own_rows"]],
    }
    share = redundancy([total[f"counted_rows_{j}"] for j in range(layers)],
                       [total[f"union_rows_{j}"] for j in range(layers)])
    rec["redundancy"] = round(share, 4) if share is not None else None
    rec["halo_step_bytes"] = int(total["halo_bytes"] / steps_all)
    rec["minibatch"] = minibatch
    if stopped_step is not None:
        rec["stopped_step"] = stopped_step
        rec["partial"] = {key: total[key] for key in carried}
    return rec


def format_epoch(rec: dict[str, Any], scores: str, unit: str = "seeds") -> str:
    """Return the epoch line; `scores` as `Task.describe` words them."""
    where = f"epoch {rec['epoch']:3d}" + (f" step {rec['step']}" if "step" in rec else "")
    evaluated = f" eval {rec['eval_s']:.2f}s" if rec.get("eval_s") else ""
    return (f"{where} | loss {rec['loss']:.4f} | {scores} | {rec['epoch_s']:.2f}s {rec[f'{unit}_per_s']:.0f} "
            f"{unit}/s{evaluated} | sample {rec['sample_s']:.2f} exch {rec['exchange_s']:.2f} "
            f"compute {rec['compute_s']:.2f} allreduce {rec['allreduce_s']:.2f} wait {rec['wait_s']:.2f} | remote "
            f"{rec['remote_feature_bytes'] / 2**20:.1f}+{rec['remote_structure_bytes'] / 2**20:.1f} MiB "
            + (f"rows {rec['embedding_bytes'] / 2**20:.1f} MiB " if rec.get("embedding_bytes") else "")
            + f"cache hit {rec['cache_hit_rate']:.2f} "
            + (f"recent {rec['recent_hit_rate']:.2f} " if rec.get("recent_hit_rate") else "") + "| "
            + (f"input {rec['rows_per_step'][0]:,.0f} rows/step " if rec.get("rows_per_step") else "")
            + (f"redundancy {rec['redundancy']:.2f} " if rec.get("redundancy") is not None else "")
            + (f"halo {rec['halo_step_bytes'] / 2**20:.1f} MiB/step " if rec.get("halo_step_bytes") else "")
            + f"| peak {rec['peak_rss_mb']:.0f} MiB")


def append_jsonl(path: str, rec: dict[str, Any]) -> None:
    """Append `rec` as one line; a torn last line (a run killed mid-write) is cut off first, so the records a
    resumed run appends stay lines of their own."""
    if _own_file(path):
        _drop_torn_line(path)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")


def _own_file(path: str) -> bool:
    """A regular file only this log writes: not a device or a pipe, nor (through /dev/stdout, /proc/self/fd/1,
    or its own name) the file this process's output is redirected to, whose other lines a cut would lose."""
    if os.path.abspath(path).startswith(("/dev/", "/proc/")):
        return False
    try:
        info = os.stat(path)
    except OSError:
        return False
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            out = os.fstat(fd)
            if (out.st_dev, out.st_ino) == (info.st_dev, info.st_ino):
                return False
    return stat.S_ISREG(info.st_mode)


def _drop_torn_line(path: str) -> None:
    """Truncate `path` to just after its last newline, unless it already ends with one (or is empty)."""
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return
        f.seek(end - 1)
        if f.read(1) == b"\n":  # the usual case: one byte read an epoch, not the whole file
            return
        f.seek(0)
        f.truncate(f.read().rfind(b"\n") + 1)  # torn (once, after a kill): read whole


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
    last_test = last.get(f"test_{best.metric}") or 0.0
    if best.val_acc is None or best.test_acc is None:
        return f"final test {name} {last_test:.4f} (no validation {name}: last epoch) ({world_size} ranks), {scope}"
    return (f"final test {name} {best.test_acc:.4f} at best val epoch {best.epoch} (val {best.val_acc:.4f}; "
            f"last epoch test {last_test:.4f}) ({world_size} ranks), {scope}")
