"""`npz:PATH`: the user's own graph in one .npz file, validated key by key before anything is built. numpy only.
Keys: docs/datasets.md; edge_index__S__R__D keys make it heterogeneous (`data.npz_hetero`). Headers are checked
before any array is read, so a file that declares absurd sizes fails without allocating them.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping

import numpy as np

from mpignn.data.graph import GraphData
from mpignn.data.npyio import refuse_beyond_memory
from mpignn.data.npz_checks import SPLIT_KEYS, UNREADABLE, expect_array, failing, read_headers, read_npz, sound_graph
from mpignn.data.npz_hetero import hetero_from_headers, hetero_npz_arrays
from mpignn.errors import DatasetError
from mpignn.fileio import atomic_path

__all__ = ["load_npz", "graph_from_arrays", "save_npz", "NPZ_KEYS"]

NPZ_KEYS = ("edge_index", "x", "y", "train_idx", "val_idx", "test_idx")


def load_npz(path: str) -> GraphData:
    """Read and validate a user graph; the first rule of docs/datasets.md it breaks is a DatasetError."""
    if not os.path.isfile(path):
        raise DatasetError(f"npz dataset file {path} does not exist. HINT: pass --dataset npz:/full/path.npz")
    try:
        headers = read_headers(path)
    except UNREADABLE as exc:
        raise failing(path)(f"not a readable .npz file ({exc})", "write it with np.savez") from None
    name = "npz-" + os.path.splitext(os.path.basename(path))[0]
    # Keys beyond the format are never read, so they cannot cost memory or hold pickles.
    reread = failing(path, "write it again with np.savez")
    graph = _checked_graph(path, headers, lambda keys: read_npz(path, keys, reread), name)
    graph.meta = {"path": os.path.abspath(path)}
    return graph


def graph_from_arrays(label: str, arrays: Mapping[str, np.ndarray], name: str) -> GraphData:
    """Check and build a graph from npz-format arrays in memory, with `load_npz`'s checks; `label` names it."""
    headers = {k: (tuple(np.shape(a)), np.asarray(a).dtype) for k, a in arrays.items()}
    return _checked_graph(label, headers, lambda keys: {k: np.asarray(arrays[k]) for k in keys}, name)


def _checked_graph(path: str, headers: dict[str, tuple[tuple[int, ...], np.dtype]],
                   read: Callable[[list[str]], dict[str, np.ndarray]], name: str) -> GraphData:
    """The one checking path of the npz format: headers, then `read` (the named keys only), then contents."""
    if any(k.startswith("edge_index__") for k in headers):  # the heterogeneous format's edge keys
        return hetero_from_headers(path, headers, read, name)
    fail = failing(path)
    missing = [k for k in NPZ_KEYS if k not in headers]
    if missing:
        raise fail(f"missing key(s) {', '.join(missing)}; found {', '.join(sorted(headers)) or 'none'}")
    expect_array(fail, "x", *headers["x"], "float", "[N, F]")
    n = headers["x"][0][0]
    expect_array(fail, "y", *headers["y"], "int", (n,), "save y.reshape(-1) if it is [N, 1]; x and y must describe "
                                                           "the same nodes (one label per row of x)")
    for key in ("edge_index", *SPLIT_KEYS, *(["num_classes"] if "num_classes" in headers else [])):
        expect_array(fail, key, *headers[key], "int", "[2, E]" if key == "edge_index" else "1-D" if key in SPLIT_KEYS
                     else "scalar")
    declared = sum(int(np.prod(headers[k][0], dtype=np.float64)) * headers[k][1].itemsize
                   for k in (*NPZ_KEYS, "num_classes") if k in headers)
    sizes = ", ".join(f"{k} {headers[k][0]}" for k in ("x", "edge_index"))
    refuse_beyond_memory(path, declared, f"the arrays need {{need}} GiB once read ({sizes}) but this host has "
                                         "{memory} GiB of memory", "check the shapes you saved")
    arrays = read([k for k in (*NPZ_KEYS, "num_classes") if k in headers])
    return sound_graph(fail, name, arrays["x"], arrays["y"], arrays["edge_index"],
                       {k: arrays[k] for k in SPLIT_KEYS}, arrays.get("num_classes"), "num_classes", where=path)


def save_npz(path: str, graph: GraphData) -> None:
    """Write `graph` atomically in the npz format (a heterogeneous one in `data.npz_hetero`'s)."""
    arrays = hetero_npz_arrays(graph) if graph.schema is not None else dict(
        edge_index=graph.edge_index(), x=graph.x, y=graph.y, **{k: getattr(graph, k) for k in SPLIT_KEYS},
        num_classes=np.int64(graph.num_classes))
    with atomic_path(path, ".npz") as tmp:
        np.savez(tmp, **arrays)
