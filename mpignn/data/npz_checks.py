"""Checks shared by `data.npz` and `data.npz_hetero`: headers, dtypes, named keys, splits, labels, the error;
`split_problem` and `check_splits` serve the npy, split-file, OGB and public readers too, so all say the same thing.
numpy and mpignn.errors / data.npyio only; imports neither npz module (both import this one).
"""
from __future__ import annotations

import zipfile
import zlib
from typing import Any, Callable

import numpy as np

from mpignn.data.npyio import read_npy_header
from mpignn.errors import DatasetError

__all__ = ["SPLIT_KEYS", "PURPOSE", "split_problem", "NPZ_HINT", "UNREADABLE", "npz_error", "read_headers",
           "open_npz", "check_dtype", "read_arrays", "check_splits", "check_labels"]

SPLIT_KEYS = ("train_idx", "val_idx", "test_idx")
NPZ_HINT = "see 'Your own graph (npz)' in docs/datasets.md for the expected keys, dtypes and shapes"
UNREADABLE = (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, NotImplementedError)

PURPOSE = {"train_idx": "nothing to train on", "val_idx": "nothing to select the model on",
           "test_idx": "nothing to report the accuracy on"}
PURPOSE.update(train=PURPOSE["train_idx"], valid=PURPOSE["val_idx"], test=PURPOSE["test_idx"])  # --splits' keys


def npz_error(path: str, problem: str, hint: str = NPZ_HINT) -> DatasetError:
    return DatasetError(f"{path}: {problem}. HINT: {hint}")


def read_headers(path: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every array in the file, read from the .npy headers only (no array data)."""
    found = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):
                continue
            key = info.filename[:-4]
            with zf.open(info) as fp:
                try:
                    shape, _, dtype = read_npy_header(fp)
                except UNREADABLE as exc:
                    raise npz_error(path, f"key {key} is not a readable .npy array ({exc})",
                                    "write the file with np.savez / np.savez_compressed") from None
            found[key] = (shape, dtype)
    return found


def open_npz(path: str) -> np.lib.npyio.NpzFile | np.ndarray:
    """np.load(path, allow_pickle=False); bytes that are neither zip nor npy raise BadZipFile, not numpy's
    ValueError about pickled data, which misleads (the file holds garbage, not a pickle)."""
    try:
        return np.load(path, allow_pickle=False)
    except ValueError:
        raise zipfile.BadZipFile("not a valid npz file (neither a zip archive nor an npy array)") from None


def check_dtype(path: str, key: str, shape: tuple[int, ...], dtype: np.dtype, want: str, form: str) -> None:
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
        if dtype.kind == "b" and key in SPLIT_KEYS:
            hint = f"{key} holds node ids, not a mask: save np.flatnonzero(mask)"
    raise npz_error(path, f"{key} must be {'an' if want == 'int' else 'a'} {want} {form} array; got {got}", hint)


def read_arrays(path: str, keys: list[str]) -> dict[str, np.ndarray]:
    """The named arrays only (allow_pickle=False): keys beyond the format are never read."""
    arrays = {}
    with np.load(path, allow_pickle=False) as f:
        for key in keys:
            try:
                arrays[key] = f[key]
            except UNREADABLE as exc:
                raise npz_error(path, f"key {key} is truncated or corrupt ({exc})",
                                "write the file again with np.savez") from None
    return arrays


def check_splits(path: Any, splits: dict[str, np.ndarray], n: int,
                 error: Callable[[Any, str, str], DatasetError] = npz_error) -> None:
    """Refuse splits that overlap, repeat, leave [0, n) or are empty, in the words of `split_problem`.

    Raises:
        DatasetError: `error(path, what, hint)` of the first problem (each reader passes its own error).
    """
    problem = split_problem(splits, n)
    if problem:
        raise error(path, *problem)


def check_labels(path: str, arrays: dict[str, np.ndarray], splits: dict[str, np.ndarray], n: int) -> int:
    """Label range against num_classes; returns num_classes."""
    y = arrays["y"]
    if "num_classes" in arrays:
        num_classes, origin = int(arrays["num_classes"].reshape(-1)[0]), "num_classes"
    else:
        num_classes, origin = int(y.max()) + 1, "y.max() + 1 (no num_classes key)"
    if not 2 <= num_classes <= n:
        raise npz_error(path, f"num_classes must be between 2 and the node count {n}; got {num_classes} from "
                              f"{origin}", "save num_classes=np.int64(C) with labels 0 .. C-1")
    if y.min() < -1 or y.max() >= num_classes:
        raise npz_error(path, f"y must lie in [-1, {num_classes}) (-1 = unlabelled, num_classes from {origin}); "
                              f"got min {y.min()}, max {y.max()}", "labels are 0 .. num_classes-1; raise "
                                                                    "num_classes or fix y")
    for key, idx in splits.items():
        unlabelled = idx[y[idx] < 0]
        if unlabelled.size:
            raise npz_error(path, f"{key} has {unlabelled.size} unlabelled node(s) (y = -1), e.g. {unlabelled[0]}; "
                                  f"split nodes need labels in [0, {num_classes})",
                            "drop unlabelled nodes from the splits, or label them")
    return num_classes


def split_problem(splits: dict[str, np.ndarray], n: int) -> tuple[str, str] | None:
    """The first problem (what, hint) of the splits, or None when they are sound."""
    owner = np.zeros(n, dtype=np.int8)
    for i, (key, idx) in enumerate(splits.items(), start=1):
        if idx.size == 0:
            return (f"{key} is empty ({PURPOSE.get(key, 'no nodes')}); all three splits need nodes",
                    "hold out some labelled nodes, e.g. split a random permutation 60/20/20")
        if idx.min() < 0 or idx.max() >= n:
            return (f"{key} has node ids outside [0, {n}): min {idx.min()}, max {idx.max()}",
                    "node ids are row numbers of x, 0 .. N-1")
        ordered = np.sort(idx)
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if repeated.size:
            return (f"{key} must list each node once; got {repeated.size} repeated id(s), e.g. {repeated[0]}",
                    f"save np.unique({key})")
        taken = owner[idx]
        if taken.any():
            other = list(splits)[int(taken[taken > 0][0]) - 1]
            shared = idx[taken > 0]
            return (f"{other} and {key} share {shared.size} node(s), e.g. {shared[0]}; a node may be in one split "
                    "only", f"remove them from one split, e.g. np.setdiff1d({key}, {other})")
        owner[idx] = i
    return None
