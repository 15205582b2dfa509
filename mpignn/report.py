"""Per-epoch numbers: one reduced record, printed as a line on rank 0 and appended as JSON."""
from __future__ import annotations

import json
import resource
import sys
from typing import Any

__all__ = ["peak_rss_mb", "format_epoch", "append_jsonl", "FIELDS"]

FIELDS = ("epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_s", "seeds_per_s", "sample_s",
          "exchange_s", "compute_s", "allreduce_s", "remote_feature_bytes", "remote_structure_bytes",
          "cache_hit_rate", "peak_rss_mb", "load_peak_rss_mb", "world_size")


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (MiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def format_epoch(rec: dict[str, Any]) -> str:
    acc = lambda v: "  -  " if v is None else f"{v:.4f}"  # noqa: E731
    return (f"epoch {rec['epoch']:3d} | loss {rec['loss']:.4f} | acc train {acc(rec['train_acc'])} "
            f"val {acc(rec['val_acc'])} test {acc(rec['test_acc'])} | {rec['epoch_s']:.2f}s "
            f"{rec['seeds_per_s']:.0f} seeds/s | sample {rec['sample_s']:.2f} exch {rec['exchange_s']:.2f} "
            f"compute {rec['compute_s']:.2f} allreduce {rec['allreduce_s']:.2f} | remote "
            f"{rec['remote_feature_bytes'] / 2**20:.1f}+{rec['remote_structure_bytes'] / 2**20:.1f} MiB "
            f"cache hit {rec['cache_hit_rate']:.2f} | peak {rec['peak_rss_mb']:.0f} MiB")


def append_jsonl(path: str, rec: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
