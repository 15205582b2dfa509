"""Predictions and embeddings for every node from a checkpoint (`python -m mpignn.predict`), and `load(OUT)`.
Importing the package loads numpy only; `restore_run`, `infer` and `predict_to` (torch) load on first use.

Layer 14 (predict): imports runtime and every layer below; never bench. `predict.cli` is its entry point.
"""
from __future__ import annotations

from typing import Any

from mpignn.predict.output import load, read_manifest

__all__ = ["load", "read_manifest", "restore_run", "infer", "predict_to"]


def __getattr__(name: str) -> Any:
    if name == "restore_run":
        from mpignn.predict.restore import restore_run

        return restore_run
    if name in ("infer", "predict_to"):
        from mpignn.predict import run

        return getattr(run, name)
    raise AttributeError(f"module 'mpignn.predict' has no attribute {name!r}")
