"""The epoch record's test oracles: the fields every node-classification record holds, and the keys
`training.record.SCHEMA` does not document."""
from __future__ import annotations

import re
from typing import Any, Mapping

from mpignn.training.record import BEST_FIELDS, SCHEMA

FIELDS = ("epoch", "epochs_done", "loss", "train_acc", "val_acc", "test_acc", "epoch_s", "eval_s", "seeds_per_s",
          "sample_s", "exchange_s", "compute_s", "allreduce_s", "wait_s", "nodes_per_step", "remote_feature_bytes",
          "remote_structure_bytes", "embedding_bytes", "cache_hit_rate", "recent_hit_rate", "graph_mib", "peak_rss_mb",
          "load_peak_rss_mb", "train_peak_rss_mb", "rss_mb", "world_size", "redundancy", "halo_step_bytes",
          *BEST_FIELDS)

_PATTERNS = [re.escape(k).replace("<split>", "(val|test)").replace("<metric>", r"[a-z]+(?:@\d+)?")
             .replace("<unit>", "[a-z]+").replace("K", r"\d+") for k in SCHEMA if "<" in k or "@K" in k]


def undocumented(rec: Mapping[str, Any]) -> list[str]:
    """The keys of `rec` that `SCHEMA` documents neither by name nor by pattern."""
    return [k for k in rec if k not in SCHEMA and not any(re.fullmatch(p, k) for p in _PATTERNS)]
