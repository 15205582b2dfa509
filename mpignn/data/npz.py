"""`npz:PATH`: the user's own graph in one .npz file, validated key by key. numpy only.

Keys: edge_index int64 [2, E] (source, target), x float32 [N, F], y int64 [N], train_idx, val_idx, test_idx
(int64 node ids). Optional: num_classes (scalar). Loaded with allow_pickle=False.
"""
from __future__ import annotations

import os
import zipfile

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.errors import DatasetError

__all__ = ["load_npz", "save_npz"]

_REQUIRED = ("edge_index", "x", "y", "train_idx", "val_idx", "test_idx")
_HINT = "HINT: see 'Your own graph (npz)' in the README for the expected keys, dtypes and shapes"


def _fail(path: str, problem: str) -> DatasetError:
    return DatasetError(f"{path}: {problem}. {_HINT}")


def load_npz(path: str) -> GraphData:
    """Read and validate a user graph.

    Raises:
        DatasetError: missing file or key, wrong dtype or shape, ids out of range, NaN features, no training
            nodes.
    """
    if not os.path.isfile(path):
        raise DatasetError(f"npz dataset file {path} does not exist. HINT: pass --dataset npz:/full/path.npz")
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = {k: f[k] for k in f.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise _fail(path, f"not a readable .npz file ({exc})") from None
    missing = [k for k in _REQUIRED if k not in arrays]
    if missing:
        raise _fail(path, f"missing key(s) {', '.join(missing)}; found {', '.join(sorted(arrays)) or 'none'}")
    edge_index, x, y = arrays["edge_index"], arrays["x"], arrays["y"]
    if x.ndim != 2 or not np.issubdtype(x.dtype, np.floating):
        raise _fail(path, f"x must be a float [N, F] array; got {x.dtype} with shape {x.shape}")
    n = x.shape[0]
    if n == 0:
        raise _fail(path, "x has no rows (a graph needs nodes)")
    if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
        raise _fail(path, f"y must be an int array of shape ({n},); got {y.dtype} with shape {y.shape}")
    if edge_index.ndim != 2 or edge_index.shape[0] != 2 or not np.issubdtype(edge_index.dtype, np.integer):
        raise _fail(path, f"edge_index must be an int [2, E] array; got {edge_index.dtype} with shape "
                          f"{edge_index.shape}")
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= n):
        raise _fail(path, f"edge_index has node ids outside [0, {n}): min {edge_index.min()}, "
                          f"max {edge_index.max()}")
    if not np.isfinite(x).all():
        raise _fail(path, f"x has {int((~np.isfinite(x)).sum())} NaN or infinite values")
    splits = {}
    for key in ("train_idx", "val_idx", "test_idx"):
        idx = arrays[key]
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            raise _fail(path, f"{key} must be a 1-D int array; got {idx.dtype} with shape {idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise _fail(path, f"{key} has node ids outside [0, {n})")
        splits[key] = idx.astype(np.int64)
    if splits["train_idx"].size == 0:
        raise _fail(path, "train_idx is empty (nothing to train on)")
    labelled = y[splits["train_idx"]]
    num_classes = int(arrays["num_classes"]) if "num_classes" in arrays else int(y.max()) + 1
    if labelled.min() < 0 or labelled.max() >= num_classes:
        raise _fail(path, f"training labels must lie in [0, {num_classes}); got [{labelled.min()}, "
                          f"{labelled.max()}]")
    rowptr, col = csr_from_edges(edge_index[0], edge_index[1], n)
    name = "npz-" + os.path.splitext(os.path.basename(path))[0]
    return GraphData(name=name, rowptr=rowptr, col=col, x=np.ascontiguousarray(x, dtype=np.float32),
                     y=y.astype(np.int64), num_classes=num_classes, meta={"path": os.path.abspath(path)},
                     **splits)


def save_npz(path: str, graph: GraphData) -> None:
    """Write `graph` in the npz format (atomically), e.g. to turn any graph into a user dataset."""
    tmp = f"{path}.tmp-{os.getpid()}.npz"
    np.savez(tmp, edge_index=graph.edge_index(), x=graph.x, y=graph.y, train_idx=graph.train_idx,
             val_idx=graph.val_idx, test_idx=graph.test_idx, num_classes=np.int64(graph.num_classes))
    os.replace(tmp, path)
