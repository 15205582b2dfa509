"""The in-memory graph every dataset loader returns, and its CSR construction. numpy and numba only (the CSR
is built by a compiled counting sort, not by sorting int64 keys)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from numba import njit

from mpignn.compiled import ensure_numba_cache_dir, read_only
from mpignn.data.npyio import read_rows, rows_per_chunk
from mpignn.errors import DatasetError

ensure_numba_cache_dir(os.path.dirname(os.path.abspath(__file__)))  # before the first @njit(cache=True) below

__all__ = ["GraphData", "csr_from_edges", "symmetrized", "is_symmetric"]

_OWN_EDGES_HINT = "node ids are row numbers of x, 0 .. N-1: the edges name nodes the graph does not have"


@dataclass
class GraphData:
    """A node-classification graph in CSR by target: `col[rowptr[v]:rowptr[v+1]]` are v's in-neighbours."""

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
    # heterogeneous graphs (`mpignn.data.hetero`): each edge's type, rows sorted by it, and the types' schema
    edge_type: np.ndarray | None = None  # int8 [num_edges]
    schema: Any = None  # HeteroSchema

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


def csr_from_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, *, drop_self_loops: bool = False,
                   symmetric: bool = False, where: str = "", hint: str = "") -> tuple[np.ndarray, np.ndarray]:
    """CSR by target with duplicate edges removed and each row's sources sorted.

    Counting sort straight into the output, so the peak is the inputs (may be mapped) plus the returned `col`.
    `symmetric` adds every edge reversed; an edge outside 0..num_nodes-1 is a DatasetError naming `where`, whose
    fix is `hint` (a reader of downloaded files: replace the file) or else the user's own numbering's.
    """
    # int ids of any width as they are (a mapped file is not copied); anything else as int64
    src, dst = (read_only(a if a.dtype.kind in "iu" else a.astype(np.int64)) for a in map(np.asarray, (src, dst)))
    counts = np.zeros(num_nodes + 1, dtype=np.int64)
    _refuse_outside(_count(dst, counts, True) + _count(src, counts, symmetric), num_nodes, (src, dst), where, hint)
    return _sorted_csr(counts, lambda rowptr, col: _fill(src, dst, rowptr, col, symmetric), drop_self_loops)


def _sorted_csr(counts: np.ndarray, fill: Callable[[np.ndarray, np.ndarray], None],
                drop_self_loops: bool) -> tuple[np.ndarray, np.ndarray]:
    """(rowptr, col) of rows of `counts[v]` entries (then one spare slot), placed by `fill(rowptr, col)`, each row
    sorted and its repeats (and self loops) dropped. `counts` becomes rowptr in place: no second node array."""
    np.cumsum(counts[:-1], out=counts[1:])  # numpy buffers the overlapping input
    counts[0] = 0
    col = np.empty(int(counts[-1]), dtype=np.int64)
    fill(counts, col)
    kept = _sort_dedup(counts, col, drop_self_loops)
    if kept < len(col):
        col.resize(kept, refcheck=False)  # shrinks in place: no second copy of the edges
    return counts, col


def _refuse_outside(outside: int, num_nodes: int, ids: tuple[np.ndarray, ...], where: str,
                    hint: str = "") -> None:
    """The kernels that fill the CSR index by id, so every edge end is checked here, once for all readers."""
    if outside:
        lo, hi = min(int(a.min()) for a in ids if a.size), max(int(a.max()) for a in ids if a.size)
        raise DatasetError(f"{where + ': ' if where else ''}expected edges between nodes 0..{num_nodes - 1}, got "
                           f"{outside} edge end(s) outside [0, {num_nodes}): min {lo}, max {hi}. "
                           f"HINT: {hint or _OWN_EDGES_HINT}")


@njit(cache=True, nogil=True)
def _count(ids, counts, add):
    """Each id's count into `counts` (when `add`); returns how many ids lie outside [0, len(counts) - 1)."""
    n, outside = len(counts) - 1, 0
    for e in range(len(ids)):
        v = ids[e]
        if v < 0 or v >= n:
            outside += 1
        elif add:
            counts[v] += 1
    return outside


@njit(cache=True, nogil=True)
def _fill(src, dst, rowptr, col, symmetric):
    cursor = rowptr[:-1].copy()
    for e in range(len(src)):
        s, d = np.int64(src[e]), np.int64(dst[e])
        col[cursor[d]] = s
        cursor[d] += 1
        if symmetric:
            col[cursor[s]] = d
            cursor[s] += 1


@njit(cache=True, nogil=True)
def _sort_dedup(rowptr, col, drop_self_loops):
    """Sort each row, drop repeats (and self loops), compact `col` and `rowptr` in place; returns the count."""
    write = 0
    start = rowptr[0]
    for v in range(len(rowptr) - 1):
        end = rowptr[v + 1]
        col[start:end].sort()
        row_start = write
        for i in range(start, end):
            u = col[i]
            if (drop_self_loops and u == v) or (write > row_start and col[write - 1] == u):
                continue
            col[write] = u
            write += 1
        start = end
        rowptr[v + 1] = write
    return write


def is_symmetric(rowptr: np.ndarray, col: np.ndarray) -> bool:
    """Whether the CSR is what METIS and KaMinPar take: rows sorted, no repeats or self loops, symmetric.

    Symmetry compares sums of two 64-bit hashes of (v, u) and (u, v) in one sequential pass (wrong with
    probability about 2^-128): an exact binary search per edge costs a random read per edge.
    """
    rowptr = np.asarray(rowptr)
    n = len(rowptr) - 1
    sums = np.zeros(4, dtype=np.uint64)
    step = rows_per_chunk(8 * max(1, int(rowptr[-1]) // max(1, n)))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        chunk = read_rows(col, int(rowptr[lo]), int(rowptr[hi]))
        if not _hash_rows(rowptr[lo:hi + 1], chunk, lo, sums):
            return False
    return bool(sums[0] == sums[2] and sums[1] == sums[3])


def symmetrized(rowptr: np.ndarray, col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The undirected, loop-free, repeat-free CSR of a directed one (counting sort from the CSR, no edge list)."""
    if is_symmetric(rowptr, col):
        return rowptr, col
    n = len(rowptr) - 1
    counts = np.zeros(n + 1, dtype=np.int64)
    counts[:-1] = np.diff(rowptr)
    _refuse_outside(_count(col, counts, True), n, (col,), "")
    return _sorted_csr(counts, lambda out_ptr, out: _fill_csr(rowptr, col, out_ptr, out), True)


@njit(cache=True, nogil=True)
def _fill_csr(rowptr, col, out_ptr, out):
    cursor = out_ptr[:-1].copy()
    for v in range(len(rowptr) - 1):
        for e in range(rowptr[v], rowptr[v + 1]):
            u = np.int64(col[e])
            out[cursor[v]] = u
            cursor[v] += 1
            out[cursor[u]] = v
            cursor[u] += 1


@njit(inline="always")
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _hash_rows(rowptr, col, first_row, sums):
    """Rows strictly increasing without self loops? Adds hashes of (v, u) to sums[0:2], of (u, v) to sums[2:4]."""
    base = rowptr[0]
    for r in range(len(rowptr) - 1):
        v = np.uint64(first_row + r)
        hv = _mix(v + np.uint64(0x9E3779B97F4A7C15))
        gv = _mix(v ^ np.uint64(0xD6E8FEB86659FD93))
        for e in range(rowptr[r] - base, rowptr[r + 1] - base):
            u = col[e]
            if u == first_row + r or (e > rowptr[r] - base and col[e - 1] >= u):
                return False
            uu = np.uint64(u)
            hu = _mix(uu + np.uint64(0x9E3779B97F4A7C15))
            gu = _mix(uu ^ np.uint64(0xD6E8FEB86659FD93))
            sums[0] += _mix(hv * np.uint64(3) + hu)
            sums[1] += _mix(gv ^ (gu * np.uint64(5)))
            sums[2] += _mix(hu * np.uint64(3) + hv)
            sums[3] += _mix(gu ^ (gv * np.uint64(5)))
    return True
