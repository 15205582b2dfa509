"""Blocks of exact layer-wise inference: chunks of own targets with all their in-edges, and where each block's
sources come from (own rows, or other ranks' rows fetched for a group of blocks at once).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Block", "make_block", "make_blocks", "type_runs", "HaloIndex", "remote_sources", "block_sources"]


@dataclass(frozen=True)
class Block:
    """Targets `lo+a .. lo+b` of a part with all their in-edges, as a bipartite block (numpy, host)."""

    src_gid: np.ndarray
    """int64 [n_src]: global ids of the sources, the targets first, then the other in-neighbours, sorted."""
    row: np.ndarray
    """int64 [e]: each in-edge's source position in `src_gid`."""
    col: np.ndarray
    """int64 [e]: each in-edge's target position, grouped and ascending (the part's CSR order)."""
    in_degree: np.ndarray
    """int64 [n_dst]: in-edges of each target."""
    n_dst: int
    dst_type: int = 0
    """Node type of every target (a block never spans two types; a homogeneous graph has type 0 only)."""
    edge_type: np.ndarray | None = None
    """int64 [e]: each in-edge's type, its index in `HeteroSchema.edge_types` (heterogeneous graphs)."""
    type_degree: np.ndarray | None = None
    """int64 [n_dst, T]: in-edges of each target per edge type (heterogeneous graphs)."""


def make_block(rowptr: np.ndarray, col: np.ndarray, lo: int, a: int, b: int, *, type_rowptr: np.ndarray | None = None,
               num_etypes: int = 1, dst_type: int = 0) -> Block:
    """The block of own rows `a..b` (local ids) of a part whose first node is `lo`; with `type_rowptr` (a
    heterogeneous part's) its edges' types, for targets of node type `dst_type`."""
    start, stop = int(rowptr[a]), int(rowptr[b])
    nbr = np.asarray(col[start:stop], dtype=np.int64)
    degree = np.diff(np.asarray(rowptr[a:b + 1], dtype=np.int64))
    inside = (nbr >= lo + a) & (nbr < lo + b)
    other = np.unique(nbr[~inside])
    row = np.empty(len(nbr), dtype=np.int64)
    row[inside] = nbr[inside] - (lo + a)
    row[~inside] = (b - a) + np.searchsorted(other, nbr[~inside])
    typed: dict[str, Any] = {}
    if type_rowptr is not None:  # each row's edges are sorted by type: runs of (row, edge type)
        runs = np.diff(np.asarray(type_rowptr[a * num_etypes:b * num_etypes + 1], dtype=np.int64))
        typed = {"edge_type": np.repeat(np.tile(np.arange(num_etypes, dtype=np.int64), b - a), runs),
                 "type_degree": runs.reshape(b - a, num_etypes)}
    return Block(src_gid=np.concatenate([np.arange(lo + a, lo + b, dtype=np.int64), other]), row=row,
                 col=np.repeat(np.arange(b - a, dtype=np.int64), degree), in_degree=degree, n_dst=b - a,
                 dst_type=dst_type, **typed)


def type_runs(part: Any) -> list[tuple[int, int, int]]:
    """(node type, first, stop) local rows of each node type's own nodes (one run per type in a part)."""
    hetero = getattr(getattr(part, "meta", None), "hetero", None)
    if not hetero:
        return [(0, 0, part.hi - part.lo)]
    counts = [int(c) for c in part.meta.parts[part.part_id]["type_counts"]]
    stops = np.cumsum(counts).tolist()
    return [(k, stop - c, stop) for k, (c, stop) in enumerate(zip(counts, stops))]


def make_blocks(part: Any, chunk: int) -> list[Block]:
    """This part's own nodes cut into blocks of at most `chunk` targets of one node type each."""
    hetero = getattr(getattr(part, "meta", None), "hetero", None)
    typed = {"type_rowptr": part.type_rowptr, "num_etypes": len(hetero["edge_types"])} if hetero else {}
    return [make_block(part.rowptr, part.col, part.lo, a, min(a + chunk, stop), dst_type=k, **typed)
            for k, first, stop in type_runs(part) for a in range(first, stop, chunk)]


class HaloIndex:
    """Where each block's remote sources sit in the sorted union of all blocks' (`ids`), made once for all
    layers, so grouping blocks and locating their rows take no sort."""

    def __init__(self, blocks: list[Block], lo: int, hi: int) -> None:
        remote = [remote_sources(b, lo, hi) for b in blocks]
        self.ids = np.unique(np.concatenate(remote)) if remote else np.empty(0, dtype=np.int64)
        self.pos = [np.searchsorted(self.ids, r) for r in remote]
        self.lo, self.hi = lo, hi

    def group(self, members: list[int], budget: int) -> list[list[int]]:
        """Consecutive blocks whose remote sources number at most `budget` rows together: a halo node several
        blocks read then crosses once, not once per block (its saving: docs/predict.md, "Speed and memory")."""
        groups: list[list[int]] = []
        current: list[int] = []
        taken, count = np.zeros(len(self.ids), dtype=bool), 0
        for i in members:
            new = int(np.count_nonzero(~taken[self.pos[i]]))
            if current and count + new > budget:
                groups.append(current)
                current, count = [], 0
                taken[:] = False
                new = len(self.pos[i])
            taken[self.pos[i]] = True
            current.append(i)
            count += new
        return groups + [current] if current else groups

    def rows_of(self, group: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(the group's remote ids, sorted; `slot`: for each position in `ids`, its row among them)."""
        taken = np.zeros(len(self.ids), dtype=bool)
        for i in group:
            taken[self.pos[i]] = True
        where = np.flatnonzero(taken)
        slot = np.zeros(len(self.ids), dtype=np.int64)
        slot[where] = np.arange(len(where))
        return self.ids[where], slot


def remote_sources(block: Block, lo: int, hi: int) -> np.ndarray:
    """A block's sources owned by other ranks, in its order."""
    other = block.src_gid[block.n_dst:]
    return np.concatenate([other[:np.searchsorted(other, lo)], other[np.searchsorted(other, hi):]])


def block_sources(block: Block, table: np.ndarray, lo: int, halo_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The rows of a block's sources: own ones from `table`, remote ones from `halo_rows` at `rows`."""
    n_dst, other = block.n_dst, block.src_gid[block.n_dst:]
    x = np.empty((len(block.src_gid), table.shape[1]), dtype=table.dtype)
    start = int(block.src_gid[0]) - lo
    x[:n_dst] = table[start:start + n_dst]
    i0, i1 = np.searchsorted(other, lo), np.searchsorted(other, lo + len(table))
    # mode="clip": "raise" (the default) copies through a buffer; the ids are in range by construction
    np.take(table, other[i0:i1] - lo, axis=0, out=x[n_dst + i0:n_dst + i1], mode="clip")
    np.take(halo_rows, rows[:i0], axis=0, out=x[n_dst:n_dst + i0], mode="clip")
    np.take(halo_rows, rows[i0:], axis=0, out=x[n_dst + i1:], mode="clip")
    return x
