"""Rows of node features for a batch: own rows locally, cached halo rows from the cache, the rest from their
owners by all-to-all (ids out, rows back). numpy + mpi4py; no torch.

The cache holds the halo nodes with most edges into this part (the ones sampling hits most), up to
`cache_size` rows, fetched once at start-up.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mpignn.exchange.alltoall import MpiAlltoall
from mpignn.sampling.distributed import group_by_owner

__all__ = ["FeatureStore"]


class FeatureStore:
    """Features and labels of any node, seen from one rank. With `comm=None` (one part) all rows are local.

    `gather` is collective over `comm` when there is more than one part: every rank calls it once per batch.
    `alltoall` is the transport (default: MPI over `comm`; see `mpignn.exchange.alltoall`).
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, lo: int, part_offsets: np.ndarray | None = None,
                 comm: Any = None, alltoall: Any = None) -> None:
        self.x, self.y, self.lo = x, y, int(lo)
        self.hi = self.lo + len(x)
        self.comm = comm if comm is not None and comm.size > 1 else None
        self.alltoall = alltoall or (MpiAlltoall(comm) if self.comm is not None else None)
        self.part_offsets = None if part_offsets is None else np.asarray(part_offsets, dtype=np.int64)
        self.cache_gid = np.empty(0, dtype=np.int64)
        self.cache_x = np.empty((0, x.shape[1]), dtype=x.dtype)
        self.remote_rows = 0
        self.cache_hits = 0
        self.bytes_received = 0

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    def build_cache(self, halo_gid: np.ndarray, halo_deg: np.ndarray, cache_size: int,
                    sampled: np.ndarray | None = None) -> None:
        """Collective over `comm`: fetch the `cache_size` hottest remote nodes.

        Hot means: most often seen in `sampled` (remote ids drawn by a probe of real batches, which reach
        beyond the halo after the first hop), then the halo nodes with most edges into this part.
        """
        if self.comm is None:
            return
        ranked = [halo_gid[np.argsort(-halo_deg, kind="stable")]]
        if sampled is not None and len(sampled):
            ids, counts = np.unique(sampled, return_counts=True)
            ranked.insert(0, ids[np.argsort(-counts, kind="stable")])
        order = np.concatenate(ranked)
        _, first = np.unique(order, return_index=True)
        hot = np.sort(order[np.sort(first)][:max(0, cache_size)])
        rows = self._fetch(hot)
        self.cache_gid, self.cache_x = hot, rows
        self.bytes_received = 0  # start-up traffic is not per-epoch traffic

    def _fetch(self, gids: np.ndarray) -> np.ndarray:
        """Collective: rows of remote `gids` (any order) from their owners."""
        comm = self.comm
        _, order, counts = group_by_owner(gids, self.part_offsets, comm.size)
        asked, asked_counts = self.alltoall(gids[order], counts)
        rows = self.x[asked - self.lo] if len(asked) else np.empty((0, self.num_features), self.x.dtype)
        got, _ = self.alltoall(np.ascontiguousarray(rows), asked_counts)
        self.bytes_received += got.nbytes
        out = np.empty((len(gids), self.num_features), dtype=self.x.dtype)
        out[order] = got
        return out

    def gather(self, n_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(features [n, F], labels [n]) of the batch's nodes; labels of remote nodes are -1 (only seeds,
        which are always own nodes, need labels)."""
        own = (n_id >= self.lo) & (n_id < self.hi)
        if self.comm is None:
            if own.all():
                return self.x[n_id - self.lo], self.y[n_id - self.lo]
            raise ValueError("node ids outside this rank's part and no communicator to fetch them")
        x = np.empty((len(n_id), self.num_features), dtype=self.x.dtype)
        y = np.full(len(n_id), -1, dtype=self.y.dtype)
        own_pos = np.flatnonzero(own)
        x[own_pos] = self.x[n_id[own_pos] - self.lo]
        y[own_pos] = self.y[n_id[own_pos] - self.lo]
        remote_pos = np.flatnonzero(~own)
        remote = n_id[remote_pos]
        slot = np.searchsorted(self.cache_gid, remote)
        slot_ok = slot < len(self.cache_gid)
        hit = np.zeros(len(remote), dtype=bool)
        hit[slot_ok] = self.cache_gid[slot[slot_ok]] == remote[slot_ok]
        x[remote_pos[hit]] = self.cache_x[slot[hit]]
        miss_pos = remote_pos[~hit]
        x[miss_pos] = self._fetch(n_id[miss_pos])
        self.remote_rows += len(remote)
        self.cache_hits += int(hit.sum())
        return x, y
