"""Parse the raw npz/npy/json files of Amazon, Coauthor, WikiCS, Flickr and Reddit in mpignn itself, into the
arrays PyG's processing builds. numpy with `allow_pickle=False` and json only, so reading can never run code.
"""
from __future__ import annotations

import json
import os
from itertools import chain
from typing import Any

import numpy as np

from mpignn.data.raw_public import checked_csr, dense_csr, npy_array, npz_arrays, raw_error, scipy_csr, scipy_parts

__all__ = ["GNN_BENCHMARK_KEYS", "FLICKR_FILES", "REDDIT_FILES", "read_gnn_benchmark", "read_wikics", "read_flickr",
           "read_reddit"]

GNN_BENCHMARK_KEYS = ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "attr_data", "attr_indices",
                      "attr_indptr", "attr_shape", "labels")
"""What PyG's `read_npz` reads of an Amazon/Coauthor file; the other keys (`class_names`, pickled in
ms_academic_cs.npz) are never read."""
_CSR_PARTS = ("data", "indices", "indptr", "shape")
FLICKR_FILES = ("adj_full.npz", "feats.npy", "class_map.json", "role.json")
REDDIT_FILES = ("reddit_data.npz", "reddit_graph.npz")


def _labels(path: str, key: str, y: np.ndarray, n: int) -> np.ndarray:
    if y.shape != (n,) or y.dtype.kind not in "iuf" or (y.dtype.kind == "f" and not np.all(y == np.round(y))):
        raise raw_error(path, f"{key}: one whole-number value per node, shape ({n},)",
                        f"{y.dtype} with shape {y.shape}")
    return y.astype(np.int64)


def read_gnn_benchmark(path: str) -> dict[str, np.ndarray]:
    """Read an Amazon/Coauthor npz as PyG's `read_npz` does (binary features; edges as stored: the caller
    symmetrises)."""
    raw = npz_arrays(path, GNN_BENCHMARK_KEYS)
    _, dst, adj_ptr, (n, n_cols) = checked_csr(path, *(raw[f"adj_{k}"] for k in _CSR_PARTS))
    if n != n_cols:
        raise raw_error(path, "a square adjacency (adj_shape)", f"{n}x{n_cols}")
    _, attr_col, attr_ptr, (rows, f) = checked_csr(path, *(raw[f"attr_{k}"] for k in _CSR_PARTS))
    if rows != n or raw["attr_data"].dtype.kind not in "biuf":
        raise raw_error(path, f"one feature row per node ({n}) of numbers",
                        f"{rows} rows of {raw['attr_data'].dtype}")
    y = _labels(path, "labels", raw["labels"], n)
    if n and y.min() < 0:
        raise raw_error(path, "labels >= 0", f"min {y.min()}")
    x = dense_csr(path, raw["attr_data"], attr_col, attr_ptr, (rows, f))
    x[x > 0] = 1
    return {"x": x, "y": y, "src": np.repeat(np.arange(n, dtype=np.int64), np.diff(adj_ptr)), "dst": dst}


def _json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: truncated or not JSON
        raise raw_error(path, "a complete JSON file", f"{type(exc).__name__}: {exc}") from None


def read_wikics(path: str) -> dict[str, np.ndarray]:
    """Read WikiCS's `data.json` as `WikiCS.process` does: an edge i -> j for each j in `links[i]` (x and the
    masks are checked against y by `public`)."""
    data = _json(path)
    keys = ("features", "labels", "links", "train_masks", "val_masks", "test_mask")
    missing = [k for k in keys if not isinstance(data, dict) or k not in data]
    if missing:
        raise raw_error(path, f"a JSON object with {', '.join(keys)}", f"no {', '.join(missing)}")
    try:
        x = np.asarray(data["features"], dtype=np.float32)
        y = np.asarray(data["labels"], dtype=np.int64)
        links = data["links"]
        lengths = np.fromiter((len(js) for js in links), dtype=np.int64, count=len(links))
        dst = np.fromiter(chain.from_iterable(links), dtype=np.float64, count=int(lengths.sum()))
        masks = {k: np.asarray(data[k], dtype=bool) for k in ("train_masks", "val_masks", "test_mask")}
    except (TypeError, ValueError) as exc:  # ragged lists, strings where numbers belong
        raise raw_error(path, "numeric features, labels, masks and lists of neighbour ids",
                        f"{type(exc).__name__}: {exc}") from None
    n = len(y)
    if len(lengths) != n:  # x and the masks against y: `public._graph` and `_mask_splits`
        raise raw_error(path, f"one list of links per label (N = {n})", f"{len(lengths)} link lists")
    fractional = dst[dst != np.round(dst)]  # int64 would truncate them: a wrong graph, silently
    if fractional.size:
        raise raw_error(path, "whole-number neighbour ids in links",
                        f"{fractional.size} fractional, e.g. {fractional[0]}")
    if n and y.min() < 0:
        raise raw_error(path, "labels >= 0", f"min {y.min()}")
    src = np.repeat(np.arange(n, dtype=np.int64), lengths)
    return {"x": x, "y": y, "src": src, "dst": dst.astype(np.int64), **masks}


def _ids(path: str, values: Any, what: str, n: int) -> np.ndarray:
    try:
        ids = np.asarray(values, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise raw_error(path, f"{what}: a list of node ids", f"{type(exc).__name__}: {exc}") from None
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise raw_error(path, f"{what}: node ids in 0..{n - 1}", f"min {ids.min()}, max {ids.max()}")
    return ids


def read_flickr(raw_dir: str) -> dict[str, np.ndarray]:
    """Read GraphSAINT's Flickr files as `Flickr.process` does (edges as stored: the file holds both directions)."""
    p = lambda f: os.path.join(raw_dir, f)  # noqa: E731
    _, indices, indptr, (n, cols) = scipy_csr(p("adj_full.npz"))
    if n != cols:
        raise raw_error(p("adj_full.npz"), "a square adjacency", f"{n}x{cols}")
    x = npy_array(p("feats.npy"), "a plain float npy array")  # numbers [N, F]: checked by `public._graph`
    class_map, role = _json(p("class_map.json")), _json(p("role.json"))
    if not isinstance(class_map, dict) or not all(k.isdigit() and isinstance(v, int) and v >= 0
                                                  for k, v in class_map.items()):
        raise raw_error(p("class_map.json"), "an object of node id -> one class id >= 0 (Flickr is single-label)",
                        "other keys or values (a multi-label class map lists classes per node)")
    y = np.full(n, -1, dtype=np.int64)
    y[_ids(p("class_map.json"), [int(k) for k in class_map], "its keys", n)] = np.fromiter(
        class_map.values(), dtype=np.int64, count=len(class_map))
    if not isinstance(role, dict) or any(k not in role for k in ("tr", "va", "te")):
        raise raw_error(p("role.json"), "an object with tr, va and te lists", f"{type(role).__name__} "
                        f"{sorted(role) if isinstance(role, dict) else ''}")
    splits = {key: np.unique(_ids(p("role.json"), role[part], part, n))
              for key, part in (("train_idx", "tr"), ("val_idx", "va"), ("test_idx", "te"))}
    row_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    return {"x": x, "y": y, "src": row_of, "dst": indices, **splits}


def read_reddit(raw_dir: str) -> dict[str, np.ndarray]:
    """Read DGL's Reddit files as `Reddit.process` does; `node_types` 1/2/3 mark train/val/test."""
    data_path, graph_path = (os.path.join(raw_dir, f) for f in REDDIT_FILES)
    data = npz_arrays(data_path, ("feature", "label", "node_types"))
    graph = scipy_parts(graph_path, ("row", "col"), "coo")
    x = data["feature"]  # numbers [N, F]: checked by `public._graph`
    n = len(x)
    y = _labels(data_path, "label", data["label"], n)
    kind = _labels(data_path, "node_types", data["node_types"], n)
    shape = tuple(int(v) for v in graph["shape"].reshape(-1))
    row, col = graph["row"].reshape(-1).astype(np.int64), graph["col"].reshape(-1).astype(np.int64)
    if shape != (n, n) or len(row) != len(col):
        raise raw_error(graph_path, f"a scipy coo matrix of {n}x{n} (save_npz)",
                        f"shape {shape}, {len(row)} rows and {len(col)} columns")
    return {"x": x, "y": y, "src": row, "dst": col,
            **{key: np.flatnonzero(kind == k).astype(np.int64)
               for k, key in enumerate(("train_idx", "val_idx", "test_idx"), start=1)}}
