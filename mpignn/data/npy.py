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
from mpignn.data.npyio import read_npy_header
from mpignn.data.npz_checks import (SPLIT_KEYS, Fail, check_finite, check_ids, check_labels, check_splits, expect_array,
                                    failing)
from mpignn.errors import DatasetError
from mpignn.fileio import load_npy, save_npy, write_json

__all__ = ["load_npy_folder", "write_npy_folder", "EDGE_FORMS"]

EDGE_FORMS = (("edge_index",), ("src", "dst"), ("rowptr", "col"))
_HINT = "see 'Your own graph (npy folder)' in docs/datasets.md for the files, dtypes and shapes"


def _header(fail: Fail, folder: Path, name: str, want: str, form: str | tuple[int, ...], hint: str = "") -> tuple:
    """The shape of `name`.npy, refused by `expect_array`, or when unreadable or in Fortran order."""
    try:
        with open(folder / f"{name}.npy", "rb") as f:
            shape, fortran, dtype = read_npy_header(f)
    except (ValueError, OSError, EOFError) as exc:
        raise fail(f"{name}.npy is not a readable .npy array ({exc})", "write it with np.save") from None
    expect_array(fail, name, shape, dtype, want, form, hint, label=f"{name}.npy")
    if fortran:
        raise fail(f"{name}.npy is stored in Fortran order; rows must be contiguous",
                   f"np.save('{name}.npy', np.ascontiguousarray(a))")
    return shape


def _load(fail: Fail, folder: Path, name: str) -> np.ndarray:
    try:
        return load_npy(folder / f"{name}.npy", mmap=True)
    except (ValueError, OSError) as exc:
        raise fail(f"{name}.npy cannot be mapped ({exc}), e.g. truncated", "write it again with np.save") from None


def _structure(fail: Fail, folder: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    found = [f for form in EDGE_FORMS for f in form if (folder / f"{f}.npy").is_file()]
    form = next((form for form in EDGE_FORMS if list(form) == found), None)
    if form is None:
        forms = " or ".join("+".join(f"{f}.npy" for f in form) for form in EDGE_FORMS)
        raise fail(f"expected the edges in exactly one form, {forms}; got "
                   f"{', '.join(f'{f}.npy' for f in found) or 'none'}")
    if form == ("edge_index",):
        _header(fail, folder, "edge_index", "int", "[2, E]")
        return csr_from_edges(*_load(fail, folder, "edge_index"), n, where=f"npy folder {folder}")
    if form == ("src", "dst"):
        shapes = [_header(fail, folder, name, "int", "1-D") for name in form]
        if shapes[0] != shapes[1]:
            raise fail(f"src.npy and dst.npy must be of one length; got shapes {shapes[0]} and {shapes[1]}",
                       "save one entry per edge in each")
        return csr_from_edges(_load(fail, folder, "src"), _load(fail, folder, "dst"), n,
                              where=f"npy folder {folder}")
    _header(fail, folder, "rowptr", "int", (n + 1,), "rowptr has one entry per node plus one (N + 1, N = rows of x)")
    _header(fail, folder, "col", "int", "1-D")
    rowptr = np.asarray(_load(fail, folder, "rowptr"), dtype=np.int64)
    col = _load(fail, folder, "col")
    if rowptr[0] != 0 or rowptr[-1] != len(col) or (np.diff(rowptr) < 0).any():
        raise fail(f"rowptr.npy must rise from 0 to len(col) = {len(col)}; got {rowptr[0]} .. "
                   f"{rowptr[-1]}{' and falls somewhere' if (np.diff(rowptr) < 0).any() else ''}",
                   "rowptr = np.concatenate([[0], np.cumsum(in_degree)])")
    check_ids(fail, "col.npy", col, n)
    return rowptr, (col if col.dtype == np.int64 else np.asarray(col, dtype=np.int64))


def load_npy_folder(folder: str | os.PathLike) -> GraphData:
    """Validate and open an npy folder: x (and an int64 CSR given as rowptr/col) memory-mapped, the rest read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"npy folder {folder} does not exist. HINT: pass --dataset npy:/full/path/to/folder")
    fail = failing(f"npy folder {folder}", _HINT)
    missing = [f"{k}.npy" for k in ("x", "y", *SPLIT_KEYS) if not (folder / f"{k}.npy").is_file()]
    if missing:
        raise fail(f"missing {', '.join(missing)}")
    n = _header(fail, folder, "x", "float32", "[N, F]")[0]
    _header(fail, folder, "y", "int", (n,), "save y.reshape(-1) (one label per row of x)")
    for name in SPLIT_KEYS:
        _header(fail, folder, name, "int", "1-D")
    meta = {}
    if (folder / "meta.json").is_file():
        try:
            meta = json.loads((folder / "meta.json").read_text())
        except ValueError:
            meta = None
        if not isinstance(meta, dict):
            raise fail("meta.json must hold a JSON object", 'write e.g. {"num_classes": 8}')
        if "num_classes" in meta and type(meta["num_classes"]) is not int:
            raise fail(f"meta.json's num_classes must be a JSON integer; got {meta['num_classes']!r}",
                       'write e.g. {"num_classes": 8}')
    x = _load(fail, folder, "x")
    check_finite(fail, "x.npy", x)
    y = np.asarray(_load(fail, folder, "y"), dtype=np.int64)
    splits = {k: np.asarray(_load(fail, folder, k), dtype=np.int64) for k in SPLIT_KEYS}
    check_splits(fail, splits, n)
    num_classes = check_labels(fail, y, splits, n, meta.get("num_classes"), "meta.json")
    rowptr, col = _structure(fail, folder, n)
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
