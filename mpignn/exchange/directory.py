"""`IdDirectory`: dataset node ids -> partition ids on any rank, with each rank holding the map of one block of
dataset ids (a ceiling-division share), so no rank holds a map of the whole graph. No torch.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mpignn.mpi import alltoallv

__all__ = ["IdDirectory"]


class IdDirectory:
    """Collective over `comm` (None: one process): built from each rank's own nodes, `dataset_ids[i]` being
    partition id `lo + i`; `lookup` answers any dataset id.
    """

    def __init__(self, comm: Any, dataset_ids: np.ndarray, lo: int, num_nodes: int) -> None:
        self.comm, self.num_nodes = comm, int(num_nodes)
        ids = np.asarray(dataset_ids, dtype=np.int64)
        size = 1 if comm is None else comm.size
        self.block = max(1, -(-self.num_nodes // size))
        pairs = np.stack([ids, lo + np.arange(len(ids), dtype=np.int64)], axis=1)
        if comm is None:
            got = pairs
        else:
            order = np.argsort(ids // self.block, kind="stable")
            counts = np.bincount(ids // self.block, minlength=size)
            got, _ = alltoallv(comm, pairs[order], counts)
        self.rank = 0 if comm is None else comm.rank
        self._part = np.full(min(self.block, max(0, self.num_nodes - self.rank * self.block)), -1, dtype=np.int64)
        self._part[got[:, 0] - self.rank * self.block] = got[:, 1]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Collective over `comm` (every rank, also with no ids): the partition ids of dataset ids `ids`."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.comm is None:
            return self._part[ids]
        dest = ids // self.block
        order = np.argsort(dest, kind="stable")
        counts = np.bincount(dest, minlength=self.comm.size)
        asked, asked_counts = alltoallv(self.comm, ids[order], counts)
        answer = self._part[asked - self.rank * self.block]
        back, _ = alltoallv(self.comm, answer, asked_counts)
        out = np.empty(len(ids), dtype=np.int64)
        out[order] = back
        return out
