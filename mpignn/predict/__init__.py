"""Predictions and embeddings for every node from a checkpoint (`python -m mpignn.predict`), and `load(OUT)`.
Importing the package loads numpy only; `restore_run`, `infer` and `predict_to` (torch) load on first use.

Layer 14 (predict): imports runtime and every layer below; never bench. `predict.cli` is its entry point.
"""
from __future__ import annotations

import importlib
from typing import Any

from mpignn.predict.output import load, read_manifest

__all__ = ["load", "read_manifest", "restore_run", "infer", "predict_to"]

_LAZY = {"restore_run": "mpignn.predict.restore", "infer": "mpignn.predict.run", "predict_to": "mpignn.predict.run"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mpignn.predict' has no attribute {name!r}")
