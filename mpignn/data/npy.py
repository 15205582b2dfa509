"""`npy:FOLDER`: a graph as a folder of .npy files, memory-mapped, so features (and a CSR) are never read whole.
For graphs too big for `npz:PATH`; the layout is in docs/datasets.md, "Your own graph (npy folder)".
Headers are checked before any data; each problem is one DatasetError. numpy (and numba through graph) only.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.npyio import iter_chunks, read_npy_header
from mpignn.data.npz_checks import SPLIT_KEYS, check_splits
from mpignn.errors import DatasetError
from mpignn.fileio import load_npy, save_npy, write_json

__all__ = ["load_npy_folder", "write_npy_folder", "EDGE_FORMS"]

EDGE_FORMS = (("edge_index",), ("src", "dst"), ("rowptr", "col"))
_HINT = "see 'Your own graph (npy folder)' in docs/datasets.md for the files, dtypes and shapes"


def _fail(folder: Path, problem: str, hint: str = _HINT) -> DatasetError:
    return DatasetError(f"npy folder {folder}: {problem}. HINT: {hint}")


def _header(folder: Path, name: str, kind: str) -> tuple[tuple[int, ...], np.dtype]:
    path = folder / f"{name}.npy"
    try:
        with open(path, "rb") as f:
            shape, fortran, dtype = read_npy_header(f)
    except (ValueError, OSError, EOFError) as exc:
        raise _fail(folder, f"{name}.npy is not a readable .npy array ({exc})", "write it with np.save") from None
    want = "an int" if kind == "iu" else "a float32"
    if dtype.hasobject:
        raise _fail(folder, f"{name}.npy must be {want} array; got dtype object (pickled Python objects, which "
                            "mpignn never loads)", f"np.save('{name}.npy', np.asarray(a, dtype=np.int64))")
    if dtype.kind not in kind or (kind == "f" and dtype != np.float32):
        target = "np.int64" if kind == "iu" else "np.float32"
        hint = f"np.save('{name}.npy', a.astype({target}))"
        if dtype.kind == "b" and name in SPLIT_KEYS:
            hint = f"{name} holds node ids, not a mask: save np.flatnonzero(mask)"
        raise _fail(folder, f"{name}.npy must be {want} array; got {dtype} with shape {shape}", hint)
    if fortran:
        raise _fail(folder, f"{name}.npy is stored in Fortran order; rows must be contiguous",
                    f"np.save('{name}.npy', np.ascontiguousarray(a))")
    return shape, dtype


def _load(folder: Path, name: str) -> np.ndarray:
    try:
        return load_npy(folder / f"{name}.npy", mmap=True)
    except (ValueError, OSError) as exc:
        raise _fail(folder, f"{name}.npy cannot be mapped ({exc}), e.g. truncated", "write it again with "
                                                                                    "np.save") from None


def _check_ids(folder: Path, name: str, ids: np.ndarray, n: int) -> None:
    """In chunks of file reads, so a mapped array stays out of memory."""
    for _, chunk in iter_chunks(ids):
        if chunk.size and (chunk.min() < 0 or chunk.max() >= n):
            raise _fail(folder, f"{name}.npy has node ids outside [0, {n}): min {chunk.min()}, max {chunk.max()}",
                        "node ids are row numbers of x, 0 .. N-1")


def _structure(folder: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    present = [form for form in EDGE_FORMS if any((folder / f"{f}.npy").is_file() for f in form)]
    if len(present) != 1 or not all((folder / f"{f}.npy").is_file() for f in present[0]):
        forms = " or ".join("+".join(f"{f}.npy" for f in form) for form in EDGE_FORMS)
        got = "none" if not present else ", ".join("+".join(f"{f}.npy" for f in form if (folder / f"{f}.npy")
                                                            .is_file()) for form in present)
        raise _fail(folder, f"expected the edges in exactly one form, {forms}; got {got}")
    form = present[0]
    shapes = {name: _header(folder, name, "iu")[0] for name in form}
    if form == ("edge_index",):
        shape = shapes["edge_index"]
        if len(shape) != 2 or shape[0] != 2:
            raise _fail(folder, f"edge_index.npy must be an int [2, E] array; got shape {shape}",
                        "save edge_index.T (it is [E, 2])" if len(shape) == 2 and shape[1] == 2 else
                        "stack sources and targets: np.stack([src, dst])")
        return csr_from_edges(*_load(folder, "edge_index"), n, where=f"npy folder {folder}")
    if form == ("src", "dst"):
        if len(shapes["src"]) != 1 or shapes["src"] != shapes["dst"]:
            raise _fail(folder, f"src.npy and dst.npy must be 1-D int arrays of one length; got shapes "
                                f"{shapes['src']} and {shapes['dst']}", "save one entry per edge in each")
        return csr_from_edges(_load(folder, "src"), _load(folder, "dst"), n, where=f"npy folder {folder}")
    if shapes["rowptr"] != (n + 1,) or len(shapes["col"]) != 1:
        raise _fail(folder, f"rowptr.npy must be int [{n + 1}] (N + 1, N = rows of x) and col.npy int [E]; got "
                            f"shapes {shapes['rowptr']} and {shapes['col']}", "rowptr has one entry per node plus one")
    rowptr = np.asarray(_load(folder, "rowptr"), dtype=np.int64)
    col = _load(folder, "col")
    if rowptr[0] != 0 or rowptr[-1] != len(col) or (np.diff(rowptr) < 0).any():
        raise _fail(folder, f"rowptr.npy must rise from 0 to len(col) = {len(col)}; got {rowptr[0]} .. "
                            f"{rowptr[-1]}{' and falls somewhere' if (np.diff(rowptr) < 0).any() else ''}",
                    "rowptr = np.concatenate([[0], np.cumsum(in_degree)])")
    _check_ids(folder, "col", col, n)
    return rowptr, (col if col.dtype == np.int64 else np.asarray(col, dtype=np.int64))


def _check_splits(folder: Path, splits: dict[str, np.ndarray], y: np.ndarray, n: int, num_classes: int) -> None:
    check_splits(folder, splits, n, _fail)
    for name, idx in splits.items():
        labels = y[idx]
        if labels.min() < 0 or labels.max() >= num_classes:
            raise _fail(folder, f"{name} nodes need labels in [0, {num_classes}); got min {labels.min()}, max "
                                f"{labels.max()}", "drop unlabelled nodes from the splits, or set num_classes in "
                                                   "meta.json")


def load_npy_folder(folder: str | os.PathLike) -> GraphData:
    """Validate and open an npy folder: x (and an int64 CSR given as rowptr/col) memory-mapped, the rest read.

    Raises:
        DatasetError: the first rule of docs/datasets.md the folder breaks.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"npy folder {folder} does not exist. HINT: pass --dataset npy:/full/path/to/folder")
    missing = [f"{k}.npy" for k in ("x", "y", *SPLIT_KEYS) if not (folder / f"{k}.npy").is_file()]
    if missing:
        raise _fail(folder, f"missing {', '.join(missing)}")
    xs, _ = _header(folder, "x", "f")
    if len(xs) != 2 or 0 in xs:
        raise _fail(folder, f"x.npy must be float32 [N, F] with N, F >= 1; got shape {xs}",
                    "give featureless nodes a constant feature, e.g. np.ones((N, 1), np.float32)")
    n = xs[0]
    if _header(folder, "y", "iu")[0] != (n,):
        raise _fail(folder, f"y.npy must be int [{n}] (one label per row of x); got shape "
                            f"{_header(folder, 'y', 'iu')[0]}", "save y.reshape(-1)")
    for name in SPLIT_KEYS:
        if len(_header(folder, name, "iu")[0]) != 1:
            raise _fail(folder, f"{name}.npy must be a 1-D int array of node ids", f"save {name}.reshape(-1)")
    meta = {}
    if (folder / "meta.json").is_file():
        try:
            meta = json.loads((folder / "meta.json").read_text())
        except ValueError:
            meta = None
        if not isinstance(meta, dict):
            raise _fail(folder, "meta.json must hold a JSON object", 'write e.g. {"num_classes": 8}')
        if "num_classes" in meta and type(meta["num_classes"]) is not int:
            raise _fail(folder, f"meta.json's num_classes must be a JSON integer; got {meta['num_classes']!r}",
                        'write e.g. {"num_classes": 8}')
    x = _load(folder, "x")
    for lo, chunk in iter_chunks(x):
        bad = ~np.isfinite(chunk)
        if bad.any():
            raise _fail(folder, f"x.npy has NaN or infinite values, e.g. in row {lo + int(np.argwhere(bad)[0, 0])}",
                        "impute or drop them, e.g. np.nan_to_num(x)")
    y = np.asarray(_load(folder, "y"), dtype=np.int64)
    num_classes = int(meta.get("num_classes", int(y.max()) + 1))
    if not 2 <= num_classes <= n or y.min() < -1 or y.max() >= num_classes:
        raise _fail(folder, f"labels must lie in [-1, num_classes) with 2 <= num_classes <= {n}; got "
                            f"num_classes {num_classes}, y in [{y.min()}, {y.max()}]",
                    "labels are 0 .. C-1 (-1 = unlabelled); set num_classes in meta.json")
    splits = {k: np.asarray(_load(folder, k), dtype=np.int64) for k in SPLIT_KEYS}
    _check_splits(folder, splits, y, n, num_classes)
    rowptr, col = _structure(folder, n)
    name = str(meta.get("name") or "npy-" + folder.name)
    return GraphData(name=name, rowptr=rowptr, col=col, x=x, y=y, num_classes=num_classes,
                     meta={"path": str(folder.resolve()),
                           **{k: v for k, v in meta.items() if k not in ("name", "num_classes")}},
                     **splits)


def write_npy_folder(folder: str | os.PathLike, *, rowptr: np.ndarray, col: np.ndarray, y: np.ndarray,
                     train_idx: np.ndarray, val_idx: np.ndarray, test_idx: np.ndarray, num_classes: int,
                     name: str, meta: dict | None = None, x: np.ndarray | None = None) -> None:
    """Write everything but (when `x` is None) x.npy, which the caller streams in itself (see NpyWriter)."""
    folder = Path(folder)
    arrays = {"rowptr": rowptr, "col": col, "y": y, "train_idx": train_idx, "val_idx": val_idx,
              "test_idx": test_idx, **({"x": x} if x is not None else {})}
    for key, array in arrays.items():
        save_npy(folder / f"{key}.npy", array)
    write_json(folder / "meta.json", {**(meta or {}), "name": name, "num_classes": int(num_classes)})
