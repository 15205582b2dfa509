"""Multi-hop neighbour sampling over a CSR graph -> SampleOutput (index arrays only; never features).

`NeighborSampler` runs the hops; where a hop's neighbours come from is a `HopSource`: the rank's own CSR
(`LocalHops`) or, in `mpignn.sampling.distributed`, the owners of remote nodes. No torch, no torch-geometric.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from mpignn.config import parse_fanout
from mpignn.sampling import kernels

__all__ = ["SampleOutput", "HopSource", "LocalHops", "NeighborSampler", "parse_fanout"]


@dataclass
class SampleOutput:
    """One sampled mini-batch, in PyG's layout.

    `n_id` holds global ids, seeds first, then each hop's new nodes. Edge i runs from local node `row[i]` (the
    sampled neighbour, the message source) to `col[i]` (its target); edges are grouped by hop, so
    `num_sampled_nodes` / `num_sampled_edges` let PyG's `trim_to_layer` drop finished hops.
    """

    n_id: np.ndarray
    row: np.ndarray
    col: np.ndarray
    batch_size: int
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]


class HopSource(Protocol):
    def sample(self, gids: np.ndarray, fanout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(counts per target, neighbour gids concatenated in target order)."""
        ...


class LocalHops:
    """Neighbours from a CSR whose rows are the global ids [lo, lo + num_rows)."""

    def __init__(self, rowptr: np.ndarray, col: np.ndarray, lo: int = 0) -> None:
        self.rowptr = np.ascontiguousarray(rowptr, dtype=np.int64)
        self.col = np.ascontiguousarray(col, dtype=np.int64)
        self.lo = int(lo)

    def sample(self, gids: np.ndarray, fanout: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return kernels.sample_rows(self.rowptr, self.col, gids - self.lo, gids, fanout, seed)


class NeighborSampler:
    """Sample `len(fanouts)` hops around seed nodes.

    Thread-safe: each thread gets its own id-to-index scratch (one int64 per graph node, allocated once and
    cleaned after each batch, so a batch costs memory and time in proportion to what it samples).
    """

    def __init__(self, source: HopSource, num_nodes: int, fanouts: Sequence[int]) -> None:
        self.source = source
        self.num_nodes = int(num_nodes)
        self.fanouts = list(fanouts)
        self._local = threading.local()

    def _scratch(self) -> np.ndarray:
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = np.full(self.num_nodes, -1, dtype=np.int64)
            self._local.scratch = scratch
        return scratch

    def sample(self, seeds: np.ndarray, seed: int) -> SampleOutput:
        """Sample around `seeds` (global ids, distinct) with the random streams of `seed`."""
        seeds = np.ascontiguousarray(seeds, dtype=np.int64)
        scratch = self._scratch()
        n_id = np.empty(max(16, len(seeds) * 4), dtype=np.int64)
        local, n_count = kernels.relabel(seeds, scratch, n_id, 0)
        if n_count != len(seeds):
            kernels.reset_scratch(scratch, n_id, n_count)
            raise ValueError("seed nodes must be distinct")
        rows, cols = [], []
        num_nodes, num_edges = [n_count], []
        f_lo, f_hi = 0, n_count
        try:
            for hop, fanout in enumerate(self.fanouts):
                counts, nbrs = self.source.sample(n_id[f_lo:f_hi], fanout, kernels.mix_seed(seed, hop))
                if n_count + len(nbrs) > len(n_id):
                    grown = np.empty(max(2 * len(n_id), n_count + len(nbrs)), dtype=np.int64)
                    grown[:n_count] = n_id[:n_count]
                    n_id = grown
                src, n_count = kernels.relabel(nbrs, scratch, n_id, n_count)
                rows.append(src)
                cols.append(np.repeat(np.arange(f_lo, f_hi, dtype=np.int64), counts))
                num_nodes.append(n_count - f_hi)
                num_edges.append(len(nbrs))
                f_lo, f_hi = f_hi, n_count
        finally:
            kernels.reset_scratch(scratch, n_id, n_count)
        empty = np.empty(0, dtype=np.int64)
        return SampleOutput(n_id=n_id[:n_count].copy(), row=np.concatenate(rows) if rows else empty,
                            col=np.concatenate(cols) if cols else empty, batch_size=len(seeds),
                            num_sampled_nodes=num_nodes, num_sampled_edges=num_edges)
