"""`npz:PATH`: the user's own graph in one .npz file, validated key by key before anything is built. numpy only.

A file with edge_index__S__R__D keys is a heterogeneous graph (`data.npz_hetero`). Keys: edge_index int [2, E]
(source, target), x float [N, F], y int [N], train_idx, val_idx, test_idx (int node
ids). Optional: num_classes (int scalar). Read with allow_pickle=False; dtypes and shapes are checked from the .npy
headers before any array is read, so a file that declares absurd sizes fails without allocating them.
"""
from __future__ import annotations

import os
import zipfile
import zlib

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.splits import split_problem
from mpignn.errors import DatasetError

__all__ = ["load_npz", "save_npz", "NPZ_KEYS"]

NPZ_KEYS = ("edge_index", "x", "y", "train_idx", "val_idx", "test_idx")
_SPLITS = ("train_idx", "val_idx", "test_idx")
_HINT = "see 'Your own graph (npz)' in the README for the expected keys, dtypes and shapes"
_UNREADABLE = (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, NotImplementedError)


def _fail(path: str, problem: str, hint: str = _HINT) -> DatasetError:
    return DatasetError(f"{path}: {problem}. HINT: {hint}")


def _headers(path: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every array in the file, read from the .npy headers only (no array data)."""
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    found = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            key = info.filename[:-4]
            with zf.open(info) as fp:
                try:
                    version = np.lib.format.read_magic(fp)
                    if version not in readers:  # 3.0 only adds utf-8 field names, which no key here has
                        raise ValueError(f"npy format version {version}")
                    shape, _, dtype = readers[version](fp)
                except _UNREADABLE as exc:
                    raise _fail(path, f"key {key} is not a readable .npy array ({exc})",
                                "write the file with np.savez / np.savez_compressed") from None
            found[key] = (tuple(shape), dtype)
    return found


def _check_dtype(path: str, key: str, shape: tuple[int, ...], dtype: np.dtype, want: str, form: str) -> None:
    """Reject non-numeric dtypes (object arrays above all: mpignn never unpickles) and wrong kinds."""
    ok = dtype.kind in "iu" if want == "int" else dtype.kind == "f"
    if ok:
        return
    target = "np.int64" if want == "int" else "np.float32"
    hint = f"save np.asarray({key}, dtype={target})"
    if dtype.hasobject:
        got = "dtype object (pickled Python objects, which mpignn never loads)"
    else:
        got = f"{dtype} with shape {shape}"
        if dtype.kind == "b" and key in _SPLITS:
            hint = f"{key} holds node ids, not a mask: save np.flatnonzero(mask)"
    raise _fail(path, f"{key} must be {'an' if want == 'int' else 'a'} {want} {form} array; got {got}", hint)


def _check_headers(path: str, headers: dict[str, tuple[tuple[int, ...], np.dtype]]) -> int:
    """Keys, dtypes, shapes and declared sizes; returns the node count N = x.shape[0]."""
    missing = [k for k in NPZ_KEYS if k not in headers]
    if missing:
        raise _fail(path, f"missing key(s) {', '.join(missing)}; found {', '.join(sorted(headers)) or 'none'}")
    (xs, xt), (ys, yt), (es, et) = headers["x"], headers["y"], headers["edge_index"]
    _check_dtype(path, "x", xs, xt, "float", "[N, F]")
    if len(xs) != 2 or xs[0] == 0 or xs[1] == 0:
        raise _fail(path, f"x must be a float [N, F] array with N >= 1 nodes and F >= 1 features; got shape {xs}",
                    "give featureless nodes a constant feature, e.g. x = np.ones((num_nodes, 1), np.float32)")
    n = xs[0]
    _check_dtype(path, "y", ys, yt, "int", f"({n},)")
    if ys != (n,):
        raise _fail(path, f"y must be an int array of shape ({n},) (one label per row of x); got shape {ys}",
                    "save y.reshape(-1) if it is [N, 1]; x and y must describe the same nodes")
    _check_dtype(path, "edge_index", es, et, "int", "[2, E]")
    if len(es) != 2 or es[0] != 2:
        turned = len(es) == 2 and es[1] == 2
        raise _fail(path, f"edge_index must be an int [2, E] array; got {et} with shape {es}",
                    "save edge_index.T (it is [E, 2])" if turned else "stack sources and targets: "
                    "np.stack([src, dst])")
    for key in _SPLITS:
        shape, dtype = headers[key]
        _check_dtype(path, key, shape, dtype, "int", "1-D")
        if len(shape) != 1:
            raise _fail(path, f"{key} must be a 1-D int array of node ids; got shape {shape}",
                        f"save {key}.reshape(-1)")
    if "num_classes" in headers:
        shape, dtype = headers["num_classes"]
        _check_dtype(path, "num_classes", shape, dtype, "int", "scalar")
        if shape not in ((), (1,)):
            raise _fail(path, f"num_classes must be an int scalar; got shape {shape}",
                        "save num_classes=np.int64(C)")
    declared = sum(int(np.prod(headers[k][0], dtype=np.float64)) * headers[k][1].itemsize
                   for k in (*NPZ_KEYS, "num_classes") if k in headers)
    memory = _physical_memory()
    if memory and declared > memory:
        sizes = ", ".join(f"{k} {headers[k][0]}" for k in ("x", "edge_index"))
        raise _fail(path, f"the arrays need {declared / 2**30:.1f} GiB once read ({sizes}) but this host has "
                          f"{memory / 2**30:.1f} GiB of memory", "check the shapes you saved")
    return n


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: no guard
        return 0


def _read(path: str, keys: list[str]) -> dict[str, np.ndarray]:
    arrays = {}
    with np.load(path, allow_pickle=False) as f:
        for key in keys:
            try:
                arrays[key] = f[key]
            except _UNREADABLE as exc:
                raise _fail(path, f"key {key} is truncated or corrupt ({exc})",
                            "write the file again with np.savez") from None
    return arrays


def _check_splits(path: str, splits: dict[str, np.ndarray], n: int) -> None:
    problem = split_problem(splits, n)
    if problem:
        raise _fail(path, *problem)


def _check_labels(path: str, arrays: dict[str, np.ndarray], splits: dict[str, np.ndarray], n: int) -> int:
    """Label range against num_classes; returns num_classes."""
    y = arrays["y"]
    if "num_classes" in arrays:
        num_classes, origin = int(arrays["num_classes"].reshape(-1)[0]), "num_classes"
    else:
        num_classes, origin = int(y.max()) + 1, "y.max() + 1 (no num_classes key)"
    if not 2 <= num_classes <= n:
        raise _fail(path, f"num_classes must be between 2 and the node count {n}; got {num_classes} from {origin}",
                    "save num_classes=np.int64(C) with labels 0 .. C-1")
    if y.min() < -1 or y.max() >= num_classes:
        raise _fail(path, f"y must lie in [-1, {num_classes}) (-1 = unlabelled, num_classes from {origin}); got "
                          f"min {y.min()}, max {y.max()}", "labels are 0 .. num_classes-1; raise num_classes or "
                                                             "fix y")
    for key, idx in splits.items():
        unlabelled = idx[y[idx] < 0]
        if unlabelled.size:
            raise _fail(path, f"{key} has {unlabelled.size} unlabelled node(s) (y = -1), e.g. {unlabelled[0]}; "
                              f"split nodes need labels in [0, {num_classes})",
                        "drop unlabelled nodes from the splits, or label them")
    return num_classes


def load_npz(path: str) -> GraphData:
    """Read and validate a user graph; every problem is one DatasetError naming the key, what was expected and
    what was found, raised before any array is used.

    Raises:
        DatasetError: missing file or key, unreadable file, wrong dtype or shape, sizes beyond this host's
            memory, ids out of range, repeated or shared split ids, empty splits, labels outside
            [0, num_classes) in a split, NaN or infinite features.
    """
    if not os.path.isfile(path):
        raise DatasetError(f"npz dataset file {path} does not exist. HINT: pass --dataset npz:/full/path.npz")
    try:
        headers = _headers(path)
    except _UNREADABLE as exc:
        raise _fail(path, f"not a readable .npz file ({exc})", "write it with np.savez") from None
    from mpignn.data.npz_hetero import is_hetero_npz, load_hetero_npz

    if is_hetero_npz(headers):
        return load_hetero_npz(path, headers)
    n = _check_headers(path, headers)
    # Keys beyond the format are never read, so they cannot cost memory or hold pickles.
    arrays = _read(path, [k for k in (*NPZ_KEYS, "num_classes") if k in headers])
    edge_index = arrays["edge_index"]
    if edge_index.size and (edge_index.min() < 0 or edge_index.max() >= n):
        raise _fail(path, f"edge_index has node ids outside [0, {n}): min {edge_index.min()}, "
                          f"max {edge_index.max()}", "node ids are row numbers of x, 0 .. N-1")
    with np.errstate(over="ignore"):  # an overflow becomes inf, reported next
        x = np.ascontiguousarray(arrays["x"], dtype=np.float32)
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise _fail(path, f"x has {bad} NaN or infinite values (as float32)",
                    "impute or drop them, e.g. np.nan_to_num(x), and keep |x| < 3.4e38")
    splits = {k: arrays[k] for k in _SPLITS}
    _check_splits(path, splits, n)
    num_classes = _check_labels(path, arrays, splits, n)
    rowptr, col = csr_from_edges(edge_index[0], edge_index[1], n)
    name = "npz-" + os.path.splitext(os.path.basename(path))[0]
    return GraphData(name=name, rowptr=rowptr, col=col, x=x, y=arrays["y"].astype(np.int64),
                     num_classes=num_classes, meta={"path": os.path.abspath(path)},
                     **{k: v.astype(np.int64) for k, v in splits.items()})


def save_npz(path: str, graph: GraphData) -> None:
    """Write `graph` in the npz format (atomically), e.g. to turn any graph into a user dataset; a
    heterogeneous graph in its own format (`data.npz_hetero`)."""
    if graph.schema is not None:
        from mpignn.data.npz_hetero import save_hetero_npz

        return save_hetero_npz(path, graph)
    tmp = f"{path}.tmp-{os.getpid()}.npz"
    np.savez(tmp, edge_index=graph.edge_index(), x=graph.x, y=graph.y, train_idx=graph.train_idx,
             val_idx=graph.val_idx, test_idx=graph.test_idx, num_classes=np.int64(graph.num_classes))
    os.replace(tmp, path)
