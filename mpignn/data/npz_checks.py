"""The checks every reader of the user's files shares, so each problem has one refusal text whatever the reader.

Each check takes the reader's `fail(problem, hint)`, which names its file. Imports none of the readers (they
import this one).
"""
from __future__ import annotations

import zipfile
import zlib
from typing import Any, Callable, Sequence

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.npyio import iter_chunks, read_npy_header
from mpignn.errors import DatasetError

__all__ = ["SPLIT_KEYS", "PURPOSE", "NPZ_HINT", "UNREADABLE", "Fail", "failing", "read_headers",
           "expect_array", "check_ids", "check_finite", "read_npz", "check_splits", "check_labels", "check_labelled",
           "sound_graph"]

SPLIT_KEYS = ("train_idx", "val_idx", "test_idx")
NPZ_HINT = "see 'Your own graph (npz)' in docs/datasets.md for the expected keys, dtypes and shapes"
UNREADABLE = (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, NotImplementedError)

PURPOSE = {"train_idx": "nothing to train on", "val_idx": "nothing to select the model on",
           "test_idx": "nothing to report the accuracy on"}
PURPOSE.update(train=PURPOSE["train_idx"], valid=PURPOSE["val_idx"], test=PURPOSE["test_idx"])  # --splits' keys

Fail = Callable[..., DatasetError]
"""A reader's refusal: `fail(problem, hint)` (hint optional) -> a DatasetError naming its file."""

_FORMS: dict[str, tuple[Callable[[tuple[int, ...]], bool], Callable[[str, tuple[int, ...]], str]]] = {
    "scalar": (lambda s: s in ((), (1,)), lambda key, s: f"save {key}=np.int64(value), one number"),
    "1-D": (lambda s: len(s) == 1, lambda key, s: f"save {key}.reshape(-1)"),
    "[2, E]": (lambda s: len(s) == 2 and s[0] == 2,
               lambda key, s: f"save {key}.T (it is [E, 2])" if len(s) == 2 and s[1] == 2 else
               "stack sources and targets: np.stack([src, dst])"),
    "[N, F]": (lambda s: len(s) == 2 and 0 not in s,
               lambda key, s: f"{key} needs N >= 1 nodes and F >= 1 features: give featureless nodes a constant "
                              "feature, e.g. x = np.ones((num_nodes, 1), np.float32)")}
"""Shapes by name: (does a shape fit, the fix of one that does not)."""


def failing(where: str, default_hint: str = NPZ_HINT) -> Fail:
    """The `fail` of a reader: DatasetError `{where}: {problem}. HINT: {hint or default_hint}` on one line."""
    return lambda problem, hint="": DatasetError(f"{where}: {' '.join(problem.split())}. HINT: {hint or default_hint}")


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
                    raise failing(path)(f"key {key} is not a readable .npy array ({exc})",
                                        "write the file with np.savez / np.savez_compressed") from None
            found[key] = (shape, dtype)
    return found


def expect_array(fail: Fail, key: str, shape: tuple[int, ...], dtype: np.dtype, want: str,
                 form: str | tuple[int, ...], hint: str = "", label: str = "") -> None:
    """Refuse an array, by its header, that is not of dtype `want` ("int", "float" or "float32") and shape `form`
    (a name of `_FORMS` or the exact shape); `label` (default `key`) names it in the problem, `key` in the fix.

    Object arrays are refused whatever `want`: mpignn never unpickles.
    """
    kind_ok = dtype.kind in "iu" if want == "int" else dtype == np.float32 if want == "float32" else dtype.kind == "f"
    fits, shape_hint = _FORMS[form] if isinstance(form, str) else (lambda s: s == form, lambda key, s: hint)
    if kind_ok and fits(shape):
        return
    target = "np.int64" if want == "int" else "np.float32"
    got = "dtype object (pickled Python objects, which mpignn never loads)" if dtype.hasobject else \
        f"{dtype} with shape {shape}"
    if kind_ok:
        hint = hint or shape_hint(key, shape)
    elif dtype.kind == "b" and key in PURPOSE:  # a split
        hint = f"{key} holds node ids, not a mask: save np.flatnonzero(mask)"
    else:
        hint = f"save np.asarray({key}, dtype={target})"
    raise fail(f"{label or key} must be {'an' if want == 'int' else 'a'} {want} {form} array; got {got}", hint)


def check_ids(fail: Fail, key: str, ids: np.ndarray, n: int) -> None:
    """Refuse ids outside [0, n), chunk by chunk (a memory-mapped array stays out of memory)."""
    for _, chunk in iter_chunks(ids):
        if chunk.size and (chunk.min() < 0 or chunk.max() >= n):
            raise fail(f"{key} has node ids outside [0, {n}): min {chunk.min()}, max {chunk.max()}",
                       "node ids are row numbers of x, 0 .. N-1")


def check_finite(fail: Fail, key: str, x: np.ndarray) -> None:
    """Refuse NaN or infinite values of `x` as float32 (overflows too), chunk by chunk up to the first bad one (a
    mapped file stays out of memory)."""
    with np.errstate(over="ignore"):  # an overflow becomes inf, refused
        for lo, chunk in iter_chunks(x):
            bad = ~np.isfinite(chunk.astype(np.float32, copy=False))
            if bad.any():
                raise fail(f"{key} has NaN or infinite values (as float32), e.g. in row "
                           f"{lo + int(np.argwhere(bad)[0, 0])}",
                           "impute or drop them, e.g. np.nan_to_num(x), and keep |x| < 3.4e38")


def read_npz(path: str, keys: Sequence[str], fail: Fail, missing: str = "", unreadable: str = "",
             catch: tuple[type[Exception], ...] = UNREADABLE) -> dict[str, np.ndarray]:
    """The arrays `keys` of an npz, read with allow_pickle=False: other keys (pickled ones too) are never read.

    `missing` and `unreadable` are the fixes of a missing key and of an unreadable file or member; `catch` is what
    reading may raise that is the file's fault (a downloaded file's reader: any Exception).
    """
    expected, key = f"expected an npz of plain arrays {', '.join(keys)}; got", ""
    try:
        try:
            z = np.load(path, allow_pickle=False)
        except ValueError:  # bytes neither zip nor npy: numpy's message about pickled data would mislead
            raise zipfile.BadZipFile("not a valid npz file (neither a zip archive nor an npy array)") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise fail(f"{expected} a single .npy array")
        with z:
            absent = [k for k in keys if k not in z.files]
            if absent:
                raise fail(f"{expected} no {', '.join(absent)} (keys: {', '.join(z.files) or 'none'})", missing)
            arrays = {}
            for key in keys:
                arrays[key] = z[key]
            return arrays
    except DatasetError:
        raise
    except catch as exc:  # not an npz, a truncated or corrupt zip or member, a pickled member (ValueError)
        if isinstance(exc, ValueError) and "allow_pickle" in str(exc):
            raise fail(f"{expected} {key}: dtype object (pickled Python objects, which mpignn never loads)",
                       f"save np.asarray({key}, dtype=np.int64)") from None
        raise fail(f"{expected} {key + ': ' if key else ''}{type(exc).__name__}: {str(exc)[:160]}",
                     unreadable) from None


def check_labels(fail: Fail, y: np.ndarray, splits: dict[str, np.ndarray], n: int,
                 num_classes: int | np.ndarray | None, origin: str) -> int:
    """Refuse num_classes outside [2, n], labels outside [-1, num_classes) and unlabelled split nodes; returns
    num_classes (None: y.max() + 1; `origin` says where a given one came from)."""
    if num_classes is None:
        num_classes, origin = int(y.max()) + 1, "y.max() + 1 (no num_classes given)"
    num_classes = int(np.asarray(num_classes).reshape(-1)[0])
    if not 2 <= num_classes <= n:
        raise fail(f"num_classes must be between 2 and the node count {n}; got {num_classes} from {origin}",
                   "set num_classes (np.int64(C) in an npz, in meta.json in an npy folder), labels 0 .. C-1")
    if y.min() < -1 or y.max() >= num_classes:
        raise fail(f"y must lie in [-1, {num_classes}) (-1 = unlabelled, num_classes from {origin}); got min "
                   f"{y.min()}, max {y.max()}", "labels are 0 .. num_classes-1; raise num_classes or fix y")
    check_labelled(fail, y, splits, num_classes)
    return num_classes


def check_labelled(fail: Fail, y: np.ndarray, splits: dict[str, np.ndarray], num_classes: int) -> None:
    """Refuse a split node labelled -1 (unlabelled), given labels already in [-1, num_classes); `splits` keyed by
    the names the file uses."""
    for key, idx in splits.items():
        unlabelled = idx[y[idx] < 0]
        if unlabelled.size:
            raise fail(f"{key} has {unlabelled.size} unlabelled node(s) (y = -1), e.g. {unlabelled[0]}; split nodes "
                       f"need labels in [0, {num_classes})",
                       f"drop them: np.setdiff1d({key}, unlabelled ids), or label them")


def check_splits(fail: Fail, splits: dict[str, np.ndarray], n: int) -> None:
    """Refuse splits that are empty, leave [0, n), repeat a node or share one."""
    owner = np.zeros(n, dtype=np.int8)
    for i, (key, idx) in enumerate(splits.items(), start=1):
        if idx.size == 0:
            raise fail(f"{key} is empty ({PURPOSE.get(key, 'no nodes')}); all three splits need nodes",
                       "hold out some labelled nodes, e.g. split a random permutation 60/20/20")
        check_ids(fail, key, idx, n)
        ordered = np.sort(idx)
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if repeated.size:
            raise fail(f"{key} must list each node once; got {repeated.size} repeated id(s), e.g. {repeated[0]}",
                       f"save np.unique({key})")
        taken = owner[idx]
        if taken.any():
            other = list(splits)[int(taken[taken > 0][0]) - 1]
            shared = idx[taken > 0]
            raise fail(f"{other} and {key} share {shared.size} node(s), e.g. {shared[0]}; a node may be in one "
                       "split only", f"remove them from one split, e.g. np.setdiff1d({key}, {other})")
        owner[idx] = i


def sound_graph(fail: Fail, name: str, x: np.ndarray, y: np.ndarray, edges: Sequence[np.ndarray],
                splits: dict[str, np.ndarray], num_classes: int | np.ndarray | None = None, origin: str = "",
                **csr: Any) -> GraphData:
    """Build the GraphData of arrays of checked dtypes and shapes, once x is finite and splits and labels sound;
    `edges` is (sources, targets), `csr` options of `csr_from_edges`."""
    with np.errstate(over="ignore"):  # an overflow becomes inf, refused next
        x = np.ascontiguousarray(x, dtype=np.float32)
    check_finite(fail, "x", x)
    y, splits = y.astype(np.int64), {k: v.astype(np.int64) for k, v in splits.items()}
    check_splits(fail, splits, len(y))
    num_classes = check_labels(fail, y, splits, len(y), num_classes, origin)
    rowptr, col = csr_from_edges(edges[0], edges[1], len(y), **csr)
    return GraphData(name=name, rowptr=rowptr, col=col, x=x, y=y, num_classes=num_classes, **splits)
