"""Rows of node features for a batch: own rows locally, cached halo rows from the cache, the rest from their
owners by all-to-all.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mpignn.exchange.alltoall import MpiAlltoall
from mpignn.partition.format import group_by_owner

__all__ = ["FeatureStore", "device_index"]


class FeatureStore:
    """Features and labels of any node, seen from one rank. With `comm=None` (one part) all rows are local.
    `gather` is collective over `comm` with several parts: every rank calls it once per batch.
    """

    def __init__(self, x: Any, y: np.ndarray, lo: int, part_offsets: np.ndarray | None = None,
                 comm: Any = None, alltoall: Any = None) -> None:
        self.x, self.y, self.lo = x, y, int(lo)
        self.hi = self.lo + len(x)
        self.comm = comm if comm is not None and comm.size > 1 else None
        self.alltoall = alltoall or (MpiAlltoall(comm) if self.comm is not None else None)
        self.part_offsets = None if part_offsets is None else np.asarray(part_offsets, dtype=np.int64)
        self.cache_gid = np.empty(0, dtype=np.int64)
        self.cache_x = self._empty_rows(0)
        self.remote_rows = 0
        self.cache_hits = 0
        self.recent_hits = 0  # remote rows the previous batch brought (`keep_recent`)
        self.bytes_received = 0
        self.keep_recent = False  # dependent batches (`--batch-dependency`): keep each batch's remote rows
        self._recent_gid = np.empty(0, dtype=np.int64)
        self._recent_x = self._empty_rows(0)
        self._labels: Any = None  # the labels on the device, for ids held there (`_gather_resident`)

    def counters(self) -> dict[str, float]:
        """Rows and bytes fetched, cache and recent hits so far (`run_epoch` diffs them)."""
        return {"remote_feature_bytes": self.bytes_received, "cache_hits": self.cache_hits,
                "remote_rows": self.remote_rows, "recent_hits": self.recent_hits}

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def on_host(self) -> bool:
        """True for a numpy table (rows gathered into host buffers), False for a torch tensor."""
        return isinstance(self.x, np.ndarray)

    def _empty_rows(self, n: int) -> Any:
        if self.on_host:
            return np.empty((n, self.x.shape[1]), dtype=self.x.dtype)
        import torch

        return torch.empty((n, self.x.shape[1]), dtype=self.x.dtype, device=self.x.device)

    def build_cache(self, gids: np.ndarray) -> None:
        """Collective over `comm`: fetch the rows of remote `gids` once and serve them from memory from now on
        (which ones: `exchange.cache_policy`). Own ids are dropped; an empty `gids` empties the cache.
        """
        if self.comm is None:
            return
        hot = np.unique(np.asarray(gids, dtype=np.int64))
        hot = hot[(hot < self.lo) | (hot >= self.hi)]
        self.cache_gid, self.cache_x = hot, self.fetch(hot)
        self.bytes_received = 0  # start-up traffic is not per-epoch traffic

    @property
    def row_bytes(self) -> int:
        """Bytes of one feature row (what a cached row costs)."""
        return int(self.x.itemsize * self.x.shape[1])

    @property
    def cache_bytes(self) -> int:
        return int(self.cache_x.nbytes)

    def fetch(self, gids: np.ndarray) -> np.ndarray:
        """Collective over `comm`: rows of remote `gids` (any order, none own) from their owners."""
        _, order, counts = group_by_owner(gids, self.part_offsets, self.comm.size)
        asked, asked_counts, pieces = self.alltoall(gids[order], counts)
        got = self.alltoall.rows(_take(self.x, asked - self.lo), asked_counts, counts, pieces)
        self.bytes_received += int(got.nbytes)
        out = self._empty_rows(len(gids))
        _put(out, order, got)
        return out

    def gather(self, n_id: np.ndarray, out: Any = None) -> tuple[Any, np.ndarray]:
        """(features [n, F], labels [n]) of the batch's nodes, features into `out` when given. Remote labels
        are -1: only seeds, always own nodes, need labels."""
        if not isinstance(n_id, np.ndarray):  # ids on a device (`sampling.device_sampler`): one part
            return self._gather_resident(n_id, out)
        own = (n_id >= self.lo) & (n_id < self.hi)
        if self.comm is None:
            if not own.all():
                raise ValueError("node ids outside this rank's part and no communicator to fetch them")
            return _take(self.x, n_id - self.lo, out=out), self.y[n_id - self.lo]
        x = self._empty_rows(len(n_id)) if out is None else out
        # One pass over all rows puts own rows in place (remote positions overwritten below): taking them apart
        # and scattering copied them twice through a temporary (its cost: docs/benchmarks.md).
        local = np.clip(n_id - self.lo, 0, max(self.hi - self.lo - 1, 0))
        y = np.full(len(n_id), -1, dtype=self.y.dtype)
        if self.hi > self.lo:
            _take(self.x, local, out=x)
            y[own] = self.y[local[own]]
        remote_pos = np.flatnonzero(~own)
        remote = n_id[remote_pos]
        hit = _fill(x, remote_pos, remote, self.cache_gid, self.cache_x)
        miss_pos = remote_pos[~hit]
        if self.keep_recent:  # rows the previous batch brought are not asked for again
            found = _fill(x, miss_pos, n_id[miss_pos], self._recent_gid, self._recent_x)
            self.recent_hits += int(found.sum())
            miss_pos = miss_pos[~found]
        _put(x, miss_pos, self.fetch(n_id[miss_pos]))
        if self.keep_recent:
            order = np.argsort(remote)
            self._recent_gid, self._recent_x = remote[order], _take(x, remote_pos[order])
        self.remote_rows += len(remote)
        self.cache_hits += int(hit.sum())
        return x, y

    def _gather_resident(self, n_id: Any, out: Any) -> tuple[Any, Any]:
        """`gather` of own ids held in a tensor: index ops on a device table, labels from a copy made there once."""
        if self.comm is not None:
            raise ValueError("ids on a device are gathered from one part's store; this one has several parts")
        if self.on_host:
            return self.gather(n_id.cpu().numpy(), out)
        local = n_id - self.lo
        if self._labels is None or self._labels.device != local.device:
            import torch

            self._labels = torch.from_numpy(np.asarray(self.y)).to(local.device)
        return _take(self.x, local, out=out), self._labels[local]


def device_index(idx: np.ndarray, device: Any) -> Any:
    """`idx` as an int64 tensor on `device`, through a pinned buffer without blocking: a blocking copy from
    pageable memory would sync the default stream (every thread's) and the host with it."""
    import torch

    ids = torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64))
    if torch.device(device).type == "cpu":
        return ids
    return ids.pin_memory().to(device, non_blocking=True)


def _take(table: Any, idx: np.ndarray, out: Any = None) -> Any:
    if isinstance(table, np.ndarray):
        if out is None:
            return table[idx]
        return np.take(table, idx, axis=0, out=out, mode="clip")  # "raise" would buffer; ids are checked
    import torch

    ids = idx if isinstance(idx, torch.Tensor) else device_index(idx, table.device)  # device ids: as they are
    return torch.index_select(table, 0, ids, out=out)


def _fill(x: Any, pos: np.ndarray, gids: np.ndarray, held_gid: np.ndarray, held_rows: Any) -> np.ndarray:
    """Put the rows of `gids` that `held_rows` holds (by sorted `held_gid`) at `pos` of `x`; which ones were there."""
    slot = np.searchsorted(held_gid, gids)
    found = slot < len(held_gid)
    found[found] = held_gid[slot[found]] == gids[found]
    _put(x, pos[found], _take(held_rows, slot[found]))
    return found


def _put(out: Any, pos: np.ndarray, rows: Any) -> None:
    if isinstance(out, np.ndarray):
        out[pos] = rows
    elif len(pos):
        out.index_copy_(0, device_index(pos, out.device), rows)
