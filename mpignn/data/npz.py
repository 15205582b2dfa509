"""`npz:PATH`: the user's own graph in one .npz file, validated key by key before anything is built. numpy only.
Keys: docs/datasets.md; edge_index__S__R__D keys make it heterogeneous (`data.npz_hetero`). Headers are checked
before any array is read, so a file that declares absurd sizes fails without allocating them.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.npyio import refuse_beyond_memory
from mpignn.data.npz_checks import (SPLIT_KEYS, UNREADABLE, check_dtype, check_labels, check_splits, npz_error,
                                    read_arrays, read_headers)
from mpignn.data.npz_hetero import hetero_from_headers, hetero_npz_arrays, is_hetero_npz
from mpignn.errors import DatasetError
from mpignn.fileio import atomic_path

__all__ = ["load_npz", "graph_from_arrays", "save_npz", "NPZ_KEYS"]

NPZ_KEYS = ("edge_index", "x", "y", "train_idx", "val_idx", "test_idx")


def _check_headers(path: str, headers: dict[str, tuple[tuple[int, ...], np.dtype]]) -> int:
    """Keys, dtypes, shapes and declared sizes; returns the node count N = x.shape[0]."""
    missing = [k for k in NPZ_KEYS if k not in headers]
    if missing:
        raise npz_error(path, f"missing key(s) {', '.join(missing)}; found {', '.join(sorted(headers)) or 'none'}")
    (xs, xt), (ys, yt), (es, et) = headers["x"], headers["y"], headers["edge_index"]
    check_dtype(path, "x", xs, xt, "float", "[N, F]")
    if len(xs) != 2 or xs[0] == 0 or xs[1] == 0:
        raise npz_error(path, f"x must be a float [N, F] array with N >= 1 nodes and F >= 1 features; got shape {xs}",
                        "give featureless nodes a constant feature, e.g. x = np.ones((num_nodes, 1), np.float32)")
    n = xs[0]
    check_dtype(path, "y", ys, yt, "int", f"({n},)")
    if ys != (n,):
        raise npz_error(path, f"y must be an int array of shape ({n},) (one label per row of x); got shape {ys}",
                        "save y.reshape(-1) if it is [N, 1]; x and y must describe the same nodes")
    check_dtype(path, "edge_index", es, et, "int", "[2, E]")
    if len(es) != 2 or es[0] != 2:
        turned = len(es) == 2 and es[1] == 2
        raise npz_error(path, f"edge_index must be an int [2, E] array; got {et} with shape {es}",
                        "save edge_index.T (it is [E, 2])" if turned else "stack sources and targets: "
                        "np.stack([src, dst])")
    for key in SPLIT_KEYS:
        shape, dtype = headers[key]
        check_dtype(path, key, shape, dtype, "int", "1-D")
        if len(shape) != 1:
            raise npz_error(path, f"{key} must be a 1-D int array of node ids; got shape {shape}",
                            f"save {key}.reshape(-1)")
    if "num_classes" in headers:
        shape, dtype = headers["num_classes"]
        check_dtype(path, "num_classes", shape, dtype, "int", "scalar")
        if shape not in ((), (1,)):
            raise npz_error(path, f"num_classes must be an int scalar; got shape {shape}",
                            "save num_classes=np.int64(C)")
    declared = sum(int(np.prod(headers[k][0], dtype=np.float64)) * headers[k][1].itemsize
                   for k in (*NPZ_KEYS, "num_classes") if k in headers)
    sizes = ", ".join(f"{k} {headers[k][0]}" for k in ("x", "edge_index"))
    refuse_beyond_memory(path, declared, f"the arrays need {{need}} GiB once read ({sizes}) but this host has "
                                         "{memory} GiB of memory", "check the shapes you saved")
    return n


def load_npz(path: str) -> GraphData:
    """Read and validate a user graph.

    Raises:
        DatasetError: the first rule of docs/datasets.md the file breaks, before any array is used.
    """
    if not os.path.isfile(path):
        raise DatasetError(f"npz dataset file {path} does not exist. HINT: pass --dataset npz:/full/path.npz")
    try:
        headers = read_headers(path)
    except UNREADABLE as exc:
        raise npz_error(path, f"not a readable .npz file ({exc})", "write it with np.savez") from None
    name = "npz-" + os.path.splitext(os.path.basename(path))[0]
    # Keys beyond the format are never read, so they cannot cost memory or hold pickles.
    graph = _checked_graph(path, headers, lambda keys: read_arrays(path, keys), name)
    graph.meta = {"path": os.path.abspath(path)}
    return graph


def graph_from_arrays(label: str, arrays: Mapping[str, np.ndarray], name: str) -> GraphData:
    """Check and build a graph from npz-format arrays in memory, with `load_npz`'s checks; `label` names it.

    Raises:
        DatasetError: as `load_npz`.
    """
    headers = {k: (tuple(np.shape(a)), np.asarray(a).dtype) for k, a in arrays.items()}
    return _checked_graph(label, headers, lambda keys: {k: np.asarray(arrays[k]) for k in keys}, name)


def _checked_graph(path: str, headers: dict[str, tuple[tuple[int, ...], np.dtype]],
                   read: Callable[[list[str]], dict[str, np.ndarray]], name: str) -> GraphData:
    """The one checking path of the npz format: headers, then `read` (the named keys only), then contents."""
    if is_hetero_npz(headers):
        return hetero_from_headers(path, headers, read, name)
    n = _check_headers(path, headers)
    arrays = read([k for k in (*NPZ_KEYS, "num_classes") if k in headers])
    with np.errstate(over="ignore"):  # an overflow becomes inf, reported next
        x = np.ascontiguousarray(arrays["x"], dtype=np.float32)
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise npz_error(path, f"x has {bad} NaN or infinite values (as float32)",
                        "impute or drop them, e.g. np.nan_to_num(x), and keep |x| < 3.4e38")
    splits = {k: arrays[k] for k in SPLIT_KEYS}
    check_splits(path, splits, n)
    num_classes = check_labels(path, arrays, splits, n)
    rowptr, col = csr_from_edges(*arrays["edge_index"], n, where=path)
    return GraphData(name=name, rowptr=rowptr, col=col, x=x, y=arrays["y"].astype(np.int64),
                     num_classes=num_classes, **{k: v.astype(np.int64) for k, v in splits.items()})


def save_npz(path: str, graph: GraphData) -> None:
    """Write `graph` atomically in the npz format (a heterogeneous one in `data.npz_hetero`'s)."""
    arrays = hetero_npz_arrays(graph) if graph.schema is not None else dict(
        edge_index=graph.edge_index(), x=graph.x, y=graph.y, **{k: getattr(graph, k) for k in SPLIT_KEYS},
        num_classes=np.int64(graph.num_classes))
    with atomic_path(path, ".npz") as tmp:
        np.savez(tmp, **arrays)
