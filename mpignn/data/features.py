"""Per-row feature transforms, applied by each owner to its own rows at load time.

Row-local, so no communication: rows other ranks fetch arrive transformed and the partition stays raw.
numpy has no bfloat16, so a bf16 table is uint16 bit patterns; the loader views them as torch.bfloat16.
"""
from __future__ import annotations

import numpy as np

from mpignn.config.choices import FEATURE_DTYPES, FEATURE_NORMS, check_choice  # there: config reads them without numpy

__all__ = ["FEATURE_NORMS", "FEATURE_DTYPES", "transform_rows", "to_bf16_bits"]

_STORAGE = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}

_CHUNK_ROWS = 1 << 16  # bounds the float64 row sums of a memory-mapped table


def transform_rows(x: np.ndarray, norm: str = "none", dtype: str = "fp32") -> np.ndarray:
    """`x` scaled by `norm` and stored as `dtype` in one chunked pass; `x` itself when neither changes it.

    `row` divides each row by its absolute sum (PyG's NormalizeFeatures). Otherwise a new array: a
    memory-mapped table is never written to.
    """
    check_choice("feature_norm", norm, FEATURE_NORMS)
    check_choice("feature_dtype", dtype, FEATURE_DTYPES)
    if norm == "none" and dtype == "fp32" and x.dtype == np.float32:
        return x
    out = np.empty(x.shape, dtype=_STORAGE[dtype])
    for lo in range(0, x.shape[0], _CHUNK_ROWS):
        rows = np.asarray(x[lo:lo + _CHUNK_ROWS], dtype=np.float32)
        if norm == "row":
            sums = np.abs(rows).sum(axis=1, dtype=np.float64, keepdims=True)
            sums[sums == 0] = 1.0
            rows = (rows / sums).astype(np.float32)
        out[lo:lo + _CHUNK_ROWS] = to_bf16_bits(rows) if dtype == "bf16" else rows
    return out


def to_bf16_bits(rows: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even as torch's conversion rounds."""
    bits = np.ascontiguousarray(rows, dtype=np.float32).view(np.uint32)
    return ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
