"""Write a partition folder (layout in `format.py`) in streaming passes: memory bounded by the node-sized
arrays and one chunk, never by the features or the edge list. numpy and numba.

One pass over the rows in order of old id appends each row to its part: the new ids of a part are its nodes
in old-id order (a stable sort by part), so appending in old-id order writes every part in new-id order.
Mapped inputs (`npy:` folders, generated synthetic graphs) are read with file reads, not through the map.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from numba import njit

from mpignn.data.graph import GraphData
from mpignn.data.hetero import type_rowptr
from mpignn.data.npyio import NpyWriter, iter_chunks, read_rows, rows_per_chunk
from mpignn.env import ensure_numba_cache_dir
from mpignn.errors import ConfigError
from mpignn.fileio import atomic_dir, save_npy, sha256_file, write_json
from mpignn.partition.format import FORMAT_VERSION, HETERO_FILES, PART_FILES, part_dir

ensure_numba_cache_dir(os.path.dirname(os.path.abspath(__file__)))  # before the first @njit(cache=True) below

__all__ = ["write_partition"]


def _renumber(parts: np.ndarray, num_parts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order: old id at each new id, node_map: new id of each old id, offsets)."""
    order = np.argsort(parts, kind="stable")
    node_map = np.empty_like(order)
    node_map[order] = np.arange(len(order), dtype=np.int64)
    offsets = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(parts, minlength=num_parts), out=offsets[1:])
    return order, node_map, offsets


@njit(cache=True)
def _count_remote(col, lo, hi, counter):
    """Add each id outside [lo, hi) to `counter`; returns how many there were."""
    remote = 0
    for e in range(len(col)):
        u = col[e]
        if u < lo or u >= hi:
            counter[u] += 1
            remote += 1
    return remote


def _stream_rows(graph: GraphData, parts: np.ndarray, node_map: np.ndarray, writers: list[NpyWriter],
                 x_writers: list[NpyWriter]) -> None:
    """Append every row's in-edges (as new ids) and features to its part's files, in old-id order."""
    rowptr = np.asarray(graph.rowptr)
    num_parts = len(writers)
    step = rows_per_chunk(8 * max(1, graph.num_edges // max(1, graph.num_nodes)))
    for lo in range(0, graph.num_nodes, step):
        hi = min(graph.num_nodes, lo + step)
        col = node_map[read_rows(graph.col, int(rowptr[lo]), int(rowptr[hi]))]
        edge_part = np.repeat(parts[lo:hi], np.diff(rowptr[lo:hi + 1]))
        for p in range(num_parts):
            writers[p].write(col[edge_part == p])
    for lo, x in iter_chunks(graph.x):
        for p in range(num_parts):
            x_writers[p].write(x[parts[lo:lo + len(x)] == p])


def write_partition(graph: GraphData, parts: np.ndarray, out: str | os.PathLike, *, num_parts: int, method: str,
                    seed: int, dataset: str, force: bool = False, source: str | None = None) -> dict:
    """Write `graph` cut by `parts` into `out` (atomically: a crash leaves no half-written folder). `source`
    (`data.dataset_source` of the files it was made from) goes into META.json with the rest, so training refuses
    the folder once those files hold other content (`format.check_source`).

    Returns:
        The META.json content (turn it into the printed report with `format.report`).
    Raises:
        ConfigError: `out` exists and `force` is not set.
    """
    out = Path(out)
    if out.exists() and not force:
        raise ConfigError(f"partition folder {out} already exists. HINT: pass --force to replace it, or pick "
                          "another --out")
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
    with atomic_dir(out) as tmp:
        save_npy(tmp / "node_map.npy", node_map)
        folders = [part_dir(tmp, p) for p in range(num_parts)]
        writers, x_writers, type_counts = [], [], []
        for p, folder in enumerate(folders):
            folder.mkdir()
            own_old = order[offsets[p]:offsets[p + 1]]
            rowptr = np.zeros(len(own_old) + 1, dtype=np.int64)
            np.cumsum(deg[own_old], out=rowptr[1:])
            lo, hi = int(offsets[p]), int(offsets[p + 1])
            save_npy(folder / "rowptr.npy", rowptr)
            if schema is not None:  # own nodes keep old-id order, so each type is one contiguous run
                typed = np.zeros(len(own_old) * te + 1, dtype=np.int64)
                np.cumsum(typed_deg[own_old].reshape(-1), out=typed[1:])
                save_npy(folder / "type_rowptr.npy", typed)
                type_counts.append(np.bincount(node_type[own_old], minlength=len(schema.node_counts)).tolist())
            save_npy(folder / "y.npy", y[own_old])
            save_npy(folder / "orig_id.npy", own_old)
            for k, v in split_sets.items():
                save_npy(folder / f"{k}.npy", np.sort(v[(v >= lo) & (v < hi)]))
            writers.append(NpyWriter(folder / "col.npy", (int(rowptr[-1]),), np.int64))
            x_writers.append(NpyWriter(folder / "x.npy", (len(own_old), graph.num_features), np.float32))
        del order, deg
        if schema is not None:
            del typed_deg, node_type
        try:
            _stream_rows(graph, parts, node_map, writers, x_writers)
        finally:
            for w in writers + x_writers:
                w.close()
        edge_cut, summaries, type_cut = 0, [], []
        counter = np.zeros(graph.num_nodes, dtype=np.int64)
        for p, folder in enumerate(folders):
            lo, hi = int(offsets[p]), int(offsets[p + 1])
            col = np.load(folder / "col.npy", mmap_mode="r", allow_pickle=False)
            cut = sum(_count_remote(chunk, lo, hi, counter) for _, chunk in iter_chunks(col))
            if schema is not None:  # cut edges of each edge type, from the runs of type_rowptr
                runs = np.diff(np.load(folder / "type_rowptr.npy"))
                etype = np.repeat(np.tile(np.arange(te, dtype=np.int8), hi - lo), runs)
                remote = (col < lo) | (col >= hi)
                type_cut.append(np.bincount(etype[remote], minlength=te).tolist())
                del runs, etype, remote
            del col
            halo_gid = np.flatnonzero(counter)
            save_npy(folder / "halo_gid.npy", halo_gid)
            save_npy(folder / "halo_deg.npy", counter[halo_gid])
            counter[halo_gid] = 0
            edge_cut += cut
            names = PART_FILES + (HETERO_FILES if schema is not None else ())
            files = {name: {"bytes": (folder / f"{name}.npy").stat().st_size,
                            "sha256": sha256_file(folder / f"{name}.npy")} for name in names}
            counts = {k: int(((v >= lo) & (v < hi)).sum()) for k, v in split_sets.items()}
            summaries.append({"nodes": hi - lo, "edges": writers[p].shape[0], "train": counts["train_idx"],
                              "val": counts["val_idx"], "test": counts["test_idx"], "halo": len(halo_gid),
                              "cut_edges": cut, "files": files})
            if schema is not None:
                summaries[-1]["type_counts"] = type_counts[p]
                summaries[-1]["cut_by_edge_type"] = type_cut[p]
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
        write_json(tmp / "META.json", meta)
    return meta
