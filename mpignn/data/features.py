"""Per-row feature transforms, applied by each owner to its own rows at load time.

Row-local transforms need no communication: every rank scales the rows it owns, so the rows other ranks fetch
(and cache) arrive already transformed, and the partition folder stays the raw data.
"""
from __future__ import annotations

import numpy as np

__all__ = ["FEATURE_NORMS", "normalize_rows"]

FEATURE_NORMS = ("none", "row")

_CHUNK_ROWS = 1 << 16  # bounds the float64 row sums of a memory-mapped table


def normalize_rows(x: np.ndarray, norm: str) -> np.ndarray:
    """`row`: each row divided by the sum of its absolute values (PyG's NormalizeFeatures on non-negative
    features such as bag-of-words; all-zero rows stay zero). `none`: `x` itself, untouched.

    Returns a new float32 array for `row`: a memory-mapped (read-only) table is never written to.
    """
    if norm == "none":
        return x
    if norm not in FEATURE_NORMS:
        raise ValueError(f"unknown feature norm {norm!r}; expected one of {FEATURE_NORMS}")
    out = np.empty(x.shape, dtype=np.float32)
    for lo in range(0, x.shape[0], _CHUNK_ROWS):
        rows = np.asarray(x[lo:lo + _CHUNK_ROWS], dtype=np.float32)
        sums = np.abs(rows).sum(axis=1, dtype=np.float64, keepdims=True)
        sums[sums == 0] = 1.0
        out[lo:lo + _CHUNK_ROWS] = rows / sums
    return out
