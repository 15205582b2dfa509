"""The in-memory graph every dataset loader returns, and its CSR construction. numpy only."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["GraphData", "csr_from_edges"]


@dataclass
class GraphData:
    """A node-classification graph in CSR by target: `col[rowptr[v]:rowptr[v+1]]` are v's in-neighbours.

    Messages flow from those neighbours to v, as in PyG's `edge_index = [source, target]`.
    """

    name: str
    rowptr: np.ndarray  # int64 [num_nodes + 1]
    col: np.ndarray  # int64 [num_edges], global ids of sources
    x: np.ndarray  # float32 [num_nodes, num_features]
    y: np.ndarray  # int64 [num_nodes]; -1 where unlabelled
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    num_classes: int
    meta: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return len(self.rowptr) - 1

    @property
    def num_edges(self) -> int:
        return len(self.col)

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    def edge_index(self) -> np.ndarray:
        """[2, E] (source, target), in PyG's orientation."""
        dst = np.repeat(np.arange(self.num_nodes, dtype=np.int64), np.diff(self.rowptr))
        return np.stack([self.col, dst])


def csr_from_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, *,
                   drop_self_loops: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """CSR by target with duplicate edges removed and each row's sources sorted.

    Returns:
        (rowptr int64 [num_nodes + 1], col int64 [E']).
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if drop_self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    key = dst * np.int64(num_nodes) + src
    # Sort by (target, source), then drop repeats. np.sort is a vectorised sort; np.unique on numpy >= 2.3
    # hashes instead and was 200x slower here on 48M keys.
    key.sort()
    if len(key):
        keep = np.empty(len(key), dtype=bool)
        keep[0] = True
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        key = key[keep]
    dst_sorted = key // num_nodes
    col = key - dst_sorted * num_nodes
    rowptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst_sorted, minlength=num_nodes), out=rowptr[1:])
    return rowptr, col
