"""Cut a graph into its parts (layout: docs/partitions.md), into a folder or into memory, by one `cut_parts`.
Streaming: memory is bounded by the node-sized arrays and one chunk, never by features or edges. A part's new
ids keep old-id order, so one pass appending rows in old-id order writes every part in order. numpy and numba.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from mpignn.data.graph import GraphData
from mpignn.data.hetero import type_rowptr
from mpignn.data.npyio import NpyWriter, iter_chunks, read_rows, rows_per_chunk
from mpignn.compiled import ensure_numba_cache_dir
from mpignn.errors import ConfigError
from mpignn.fileio import atomic_dir, save_npy, sha256_file, write_json
from mpignn.partition.format import FORMAT_VERSION, HETERO_FILES, PART_FILES, part_dir

ensure_numba_cache_dir(os.path.dirname(os.path.abspath(__file__)))  # before the first @njit(cache=True) below

__all__ = ["write_partition", "parts_in_memory", "cut_parts", "MemoryParts"]


def _renumber(parts: np.ndarray, num_parts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order: old id at each new id, node_map: new id of each old id, offsets)."""
    order = np.argsort(parts, kind="stable")
    node_map = np.empty_like(order)
    node_map[order] = np.arange(len(order), dtype=np.int64)
    offsets = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(parts, minlength=num_parts), out=offsets[1:])
    return order, node_map, offsets


@njit(cache=True, nogil=True)
def _count_remote(col, lo, hi, counter):
    remote = 0
    for e in range(len(col)):
        u = col[e]
        if u < lo or u >= hi:
            counter[u] += 1
            remote += 1
    return remote


def _stream_rows(graph: GraphData, parts: np.ndarray, node_map: np.ndarray, writers: list[NpyWriter],
                 x_writers: list[NpyWriter]) -> None:
    rowptr = np.asarray(graph.rowptr)
    step = rows_per_chunk(8 * max(1, graph.num_edges // max(1, graph.num_nodes)))
    for lo in range(0, graph.num_nodes, step):
        hi = min(graph.num_nodes, lo + step)
        col = node_map[read_rows(graph.col, int(rowptr[lo]), int(rowptr[hi]))]
        edge_part = np.repeat(parts[lo:hi], np.diff(rowptr[lo:hi + 1]))
        for p, writer in enumerate(writers):
            writer.write(col[edge_part == p])
    for lo, x in iter_chunks(graph.x):
        for p, writer in enumerate(x_writers):
            writer.write(x[parts[lo:lo + len(x)] == p])


class _FolderParts:
    """Where `cut_parts` puts a folder's parts: npy files in `root/part-NNN/`, the big ones appended in order."""

    def __init__(self, root: Path, num_parts: int) -> None:
        self.root = root
        for p in range(num_parts):
            part_dir(root, p).mkdir()

    def put(self, p: int, name: str, array: np.ndarray) -> None:
        save_npy(part_dir(self.root, p) / f"{name}.npy", array)

    def appender(self, p: int, name: str, shape: tuple[int, ...], dtype: Any) -> NpyWriter:
        return NpyWriter(part_dir(self.root, p) / f"{name}.npy", shape, dtype)

    def get(self, p: int, name: str) -> np.ndarray:
        return np.load(part_dir(self.root, p) / f"{name}.npy", mmap_mode="r", allow_pickle=False)

    def describe(self, p: int, names: tuple[str, ...]) -> dict:
        folder = part_dir(self.root, p)
        return {"files": {name: {"bytes": (folder / f"{name}.npy").stat().st_size,
                                 "sha256": sha256_file(folder / f"{name}.npy")} for name in names}}


class _Appender:
    """An array of a known shape filled by rows appended in order (what NpyWriter does to a file)."""

    def __init__(self, shape: tuple[int, ...], dtype: Any) -> None:
        self.array = np.empty(shape, dtype=dtype)
        self.shape = self.array.shape
        self.rows = 0

    def write(self, chunk: np.ndarray) -> None:
        self.array[self.rows:self.rows + len(chunk)] = chunk
        self.rows += len(chunk)

    def close(self) -> None:
        if self.rows != self.shape[0]:
            raise ValueError(f"{self.rows} rows appended, {self.shape[0]} declared")


class MemoryParts:
    """Where `cut_parts` puts parts held in memory: `arrays[p]` is {file name (`format.PART_FILES`): array}."""

    def __init__(self, num_parts: int) -> None:
        self.arrays: list[dict[str, np.ndarray]] = [{} for _ in range(num_parts)]

    def put(self, p: int, name: str, array: np.ndarray) -> None:
        self.arrays[p][name] = np.ascontiguousarray(array)

    def appender(self, p: int, name: str, shape: tuple[int, ...], dtype: Any) -> _Appender:
        out = _Appender(shape, dtype)
        self.arrays[p][name] = out.array
        return out

    def get(self, p: int, name: str) -> np.ndarray:
        return self.arrays[p][name]

    def describe(self, p: int, names: tuple[str, ...]) -> dict:
        return {}


def write_partition(graph: GraphData, parts: np.ndarray, out: str | os.PathLike, *, num_parts: int, method: str,
                    seed: int, dataset: str, force: bool = False, source: str | None = None) -> dict:
    """Write `graph` cut by `parts` into `out` atomically. META.json records `source`, so training refuses
    the folder once those files hold other content. Returns META.json's content (`format.report` reports it)."""
    out = Path(out)
    if out.exists() and not force:
        raise ConfigError(f"partition folder {out} already exists. HINT: pass --force to replace it, or pick "
                          "another --out")
    with atomic_dir(out) as tmp:
        node_map, meta = cut_parts(graph, parts, _FolderParts(tmp, num_parts), num_parts=num_parts, method=method,
                                   seed=seed, dataset=dataset, source=source)
        save_npy(tmp / "node_map.npy", node_map)
        write_json(tmp / "META.json", meta)
    return meta


def parts_in_memory(graph: GraphData, parts: np.ndarray, *, num_parts: int, method: str, seed: int,
                    dataset: str) -> tuple[np.ndarray, dict, list[dict[str, np.ndarray]]]:
    """(node_map, META.json without checksums, each part's arrays), as `write_partition` would write them.
    Holds every part at once (about the graph's size again)."""
    sink = MemoryParts(num_parts)
    node_map, meta = cut_parts(graph, parts, sink, num_parts=num_parts, method=method, seed=seed, dataset=dataset)
    return node_map, meta, sink.arrays


def cut_parts(graph: GraphData, parts: np.ndarray, sink: Any, *, num_parts: int, method: str, seed: int,
              dataset: str, source: str | None = None) -> tuple[np.ndarray, dict]:
    """Hand every part's arrays to `sink`: small ones whole, columns and features appended in one pass, read
    back for the halo. Returns (node_map: new id of each original id, META.json's content)."""
    parts = np.asarray(parts, dtype=np.int64)
    order, node_map, offsets = _renumber(parts, num_parts)
    deg = np.diff(np.asarray(graph.rowptr))
    schema = graph.schema
    if schema is not None:  # heterogeneous: per-(row, edge type) degrees and each node's type
        te = schema.num_etypes
        typed_deg = np.diff(type_rowptr(graph.rowptr, graph.edge_type, te)).reshape(-1, te)
        node_type = np.repeat(np.arange(len(schema.node_counts)), schema.node_counts)
    y = np.asarray(graph.y)
    split_sets = {k: node_map[np.asarray(getattr(graph, k))] for k in ("train_idx", "val_idx", "test_idx")}
    writers, x_writers = [], []
    by_type: list[dict] = [{} for _ in range(num_parts)]  # heterogeneous: META.json's per-type counts of each part
    for p in range(num_parts):
        own_old = order[offsets[p]:offsets[p + 1]]
        rowptr = np.zeros(len(own_old) + 1, dtype=np.int64)
        np.cumsum(deg[own_old], out=rowptr[1:])
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        sink.put(p, "rowptr", rowptr)
        if schema is not None:  # own nodes keep old-id order, so each type is one contiguous run
            typed = np.zeros(len(own_old) * te + 1, dtype=np.int64)
            np.cumsum(typed_deg[own_old].reshape(-1), out=typed[1:])
            sink.put(p, "type_rowptr", typed)
            by_type[p]["type_counts"] = np.bincount(node_type[own_old], minlength=len(schema.node_counts)).tolist()
        sink.put(p, "y", y[own_old])
        sink.put(p, "orig_id", own_old)
        for k, v in split_sets.items():
            sink.put(p, k, np.sort(v[(v >= lo) & (v < hi)]))
        writers.append(sink.appender(p, "col", (int(rowptr[-1]),), np.int64))
        x_writers.append(sink.appender(p, "x", (len(own_old), graph.num_features), np.float32))
    del order, deg
    if schema is not None:
        del typed_deg, node_type
    try:
        _stream_rows(graph, parts, node_map, writers, x_writers)
    finally:
        for w in writers + x_writers:
            w.close()
    edge_cut, summaries = 0, []
    counter = np.zeros(graph.num_nodes, dtype=np.int64)
    for p in range(num_parts):
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        col = sink.get(p, "col")
        cut = sum(_count_remote(chunk, lo, hi, counter) for _, chunk in iter_chunks(col))
        if schema is not None:  # cut edges of each edge type, from the runs of type_rowptr
            runs = np.diff(np.asarray(sink.get(p, "type_rowptr")))
            etype = np.repeat(np.tile(np.arange(te, dtype=np.int8), hi - lo), runs)
            remote = (col < lo) | (col >= hi)
            by_type[p]["cut_by_edge_type"] = np.bincount(etype[remote], minlength=te).tolist()
            del runs, etype, remote
        del col
        halo_gid = np.flatnonzero(counter)
        sink.put(p, "halo_gid", halo_gid)
        sink.put(p, "halo_deg", counter[halo_gid])
        counter[halo_gid] = 0
        edge_cut += cut
        counts = {k: int(((v >= lo) & (v < hi)).sum()) for k, v in split_sets.items()}
        names = PART_FILES + (HETERO_FILES if schema is not None else ())
        summaries.append({"nodes": hi - lo, "edges": writers[p].shape[0], "train": counts["train_idx"],
                          "val": counts["val_idx"], "test": counts["test_idx"], "halo": len(halo_gid),
                          "cut_edges": cut, **sink.describe(p, names), **by_type[p]})
    meta = {
        "format": FORMAT_VERSION, "dataset": dataset, "method": method, "seed": seed, "num_parts": num_parts,
        "num_nodes": graph.num_nodes, "num_edges": graph.num_edges, "num_features": graph.num_features,
        "num_classes": graph.num_classes, "part_offsets": offsets.tolist(), "edge_cut": edge_cut,
        "parts": summaries,
    }
    if schema is not None:
        meta["hetero"] = schema.to_json()
    if source is not None:
        meta["source"] = source
    return node_map, meta
