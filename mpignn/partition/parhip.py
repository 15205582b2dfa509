"""The ParHIP binary graph file (KaMinPar's and ParHIP's input), written in chunks. numpy only.

    header   uint64 version, n, m (m counts both directions of each edge)
    offsets  uint64 [n + 1]: byte offset in the file of each node's first neighbour
    adjacency  uint32 [m] node ids (uint64 when n >= 2^31)

version's bits (lowest first): no edge weights, no node weights, 32-bit edge ids, 32-bit node ids, 32-bit node
weights, 32-bit edge weights.
"""
from __future__ import annotations

import os

import numpy as np

from mpignn.data.npyio import read_rows, rows_per_chunk

__all__ = ["write_parhip"]


def write_parhip(path: str | os.PathLike, rowptr: np.ndarray, col: np.ndarray) -> None:
    """Write an undirected CSR (both directions present, no self loops) as a ParHIP file."""
    n, m = len(rowptr) - 1, int(rowptr[-1])
    small = n < 2**31
    ids = np.uint32 if small else np.uint64
    version = 1 | 2 | (8 if small else 0) | 16 | 32
    header = np.array([version, n, m], dtype=np.uint64)
    base = header.nbytes + (n + 1) * 8
    step = rows_per_chunk(8)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for lo in range(0, n + 1, step):
            f.write((base + np.asarray(rowptr[lo:lo + step], dtype=np.uint64) * np.dtype(ids).itemsize).tobytes())
        for lo in range(0, m, step):
            f.write(read_rows(col, lo, min(m, lo + step)).astype(ids).tobytes())
