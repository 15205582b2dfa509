"""Parse Planetoid's, Tolokers' and IMDB's raw files in mpignn itself, so reading them can never run code,
into the arrays PyG's processing builds. Planetoid's pickles go through an unpickler that allows only the
globals those files name, rebuilt into inert stand-ins. Also what every public reader shares: the raw files'
refusals, npz/npy/scipy readers and the staged download. numpy only: no torch, torch-geometric or scipy.
"""
from __future__ import annotations

import io
import os
import pickle
import shutil
import tempfile
from collections import defaultdict
from itertools import product
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mpignn.data.npyio import refuse_beyond_memory
from mpignn.data.npz_checks import Fail, failing, read_npz
from mpignn.errors import DatasetError

__all__ = ["PLANETOID_PARTS", "read_planetoid", "read_heterophilous", "read_imdb", "npz_arrays", "npy_array",
           "scipy_parts", "scipy_csr", "checked_csr", "dense_csr", "raw_error", "fetch_staged", "IMDB_FILES",
           "IMDB_NODE_TYPES"]

PLANETOID_PARTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
IMDB_FILES = ("adjM.npz", "features_0.npz", "features_1.npz", "features_2.npz", "labels.npy",
              "train_val_test_idx.npz")
IMDB_NODE_TYPES = ("movie", "director", "actor")  # the order of adjM's rows, as IMDB.process slices it


class _Csr:
    """What a pickled scipy csr_matrix becomes here: its state dict, nothing executed."""

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _NdarrayName:
    """What the global `numpy.ndarray` becomes: a name `_reconstruct` accepts, not a constructor to call."""


def _reconstruct(cls: Any, shape: Any, typecode: Any) -> np.ndarray:
    # numpy pickles an array as _reconstruct(ndarray, (0,), b"b") followed by ndarray.__setstate__.
    if cls is not _NdarrayName:
        raise pickle.UnpicklingError(f"array reconstruction of {cls!r}")
    return np.ndarray((0,), dtype=np.uint8)


def _dtype(spec: Any, align: Any = 0, copy: Any = 1) -> np.dtype:
    dtype = np.dtype(spec, bool(align), bool(copy))
    if dtype.hasobject or dtype.kind not in "biuf":
        raise pickle.UnpicklingError(f"dtype {spec!r} (only bool, int and float arrays are allowed)")
    return dtype


def _list(*args: Any) -> list:
    if args and args[0] is not None:
        raise pickle.UnpicklingError("list() with arguments")
    return list()


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    # Python 3 pickles raw array bytes at protocol 2 as _codecs.encode(str, "latin1").
    if not (isinstance(text, str) and encoding in ("latin1", "latin-1")):
        raise pickle.UnpicklingError("_codecs.encode other than of a str to latin1")
    return text.encode("latin1")


def _defaultdict(factory: Any = None) -> defaultdict:
    if factory is not _list and factory is not None:
        raise pickle.UnpicklingError("defaultdict with a factory other than list")
    return defaultdict(list)


# (module, name) -> the object handed to the pickle. Python 2 and 3 spellings, old and new module paths.
_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): _NdarrayName,
    ("numpy", "dtype"): _dtype,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("scipy.sparse.csr", "csr_matrix"): _Csr,
    ("scipy.sparse._csr", "csr_matrix"): _Csr,
    ("collections", "defaultdict"): _defaultdict,
    ("__builtin__", "list"): _list,
    ("builtins", "list"): _list,
    ("_codecs", "encode"): _encode,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not an array, csr matrix or adjacency "
                                         "list") from None


def raw_fail(path: str, source: str = "the dataset's original file") -> Fail:
    """The `fail` of a raw file that is not what its dataset ships: whatever the problem, the fix is the original
    (`source`), so a shared check's hint, written for the user's own files, is not used."""
    refuse = failing(path, f"replace it with {source}, or delete it to download it again")
    return lambda problem, hint="": refuse(problem)


def raw_error(path: str, expected: str, got: str, source: str = "the dataset's original file") -> DatasetError:
    """The refusal of a raw file that is not what its dataset ships (`source`: where the original is)."""
    return raw_fail(path, source)(f"expected {expected}, got {' '.join(got.split())[:200]}")


def fetch_staged(name: str, folder: str, missing: Sequence[str], fetch: Callable[[str], None],
                 moves: Mapping[str, str], url: str = "", what: str = "the raw files") -> None:
    """Run `fetch(tmp)` in a fresh hidden folder beside the destinations, then rename only `moves` (name in tmp ->
    destination) into place, so a half-written download is never taken for a dataset's files. Any failure is one
    DatasetError: `name` is not in `folder` and could not be downloaded."""
    parent = os.path.dirname(next(iter(moves.values())))
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".download-", dir=parent)
        try:
            fetch(tmp)
            for src, dst in moves.items():
                os.replace(os.path.join(tmp, src), dst)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except Exception as exc:  # offline download failures come in many types
        listed = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        source = f" from {url}" if url else ""
        raise DatasetError(f"{name} is not under {folder} ({listed} missing) and downloading it{source} failed "
                           f"({type(exc).__name__}: {str(exc)[:160]}). HINT: copy {what} into {folder}, or run once "
                           "on a machine with network access and point --root at that folder") from None


_PLANETOID = "the original file from https://github.com/kimiyoung/planetoid (data/)"


def _bad(path: str, what: str) -> DatasetError:
    return raw_error(path, "a Planetoid raw file (numpy arrays, a scipy csr matrix or a dict of neighbour lists)",
                     what, _PLANETOID)


def _unpickle(path: str) -> Any:
    with open(path, "rb") as f:
        blob = f.read()
    try:
        return _RestrictedUnpickler(io.BytesIO(blob), encoding="latin1").load()
    except Exception as exc:  # any malformed or refused pickle is the file's fault
        raise _bad(path, f"{type(exc).__name__}: {str(exc)[:160]}".replace("\n", " ")) from None


def _plain(obj: Any) -> bool:
    # checked again after loading, whatever the dtype's pickled state said
    return type(obj) is np.ndarray and obj.dtype.kind in "biuf" and not obj.dtype.hasobject


def _dense(path: str, obj: Any) -> np.ndarray:
    """A pickled matrix as a dense float32 array (csr densified as PyG's `todense()` does)."""
    if isinstance(obj, _Csr):
        state = obj.state if isinstance(obj.state, dict) else {}
        shape = state.get("_shape", state.get("shape"))
        parts = [state.get(k) for k in ("data", "indices", "indptr")]
        if not (isinstance(shape, tuple) and len(shape) == 2 and all(_plain(p) for p in parts)):
            raise _bad(path, "a csr matrix without data/indices/indptr/shape")
        return dense_csr(path, *checked_csr(path, *parts, shape))
    if _plain(obj) and obj.ndim == 2:
        return obj.astype(np.float32)
    raise _bad(path, f"a {type(obj).__name__} where a 2-d matrix belongs")


def checked_csr(path: str, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                shape: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
    """(data, int64 indices, int64 indptr, (rows, cols)) of csr parts that fit together and into `shape`, so
    `dense_csr` and row expansions index within them."""
    shape = np.asarray(shape)
    if not (shape.shape == (2,) and shape.dtype.kind in "iu" and indptr.ndim == indices.ndim == 1
            and indptr.dtype.kind in "iu" and indices.dtype.kind in "iu"):
        raise raw_error(path, "csr parts (int indices and indptr, a shape of 2 ints)",
                        f"shapes {indices.shape} {indptr.shape} {shape.shape}")
    rows, cols = int(shape[0]), int(shape[1])
    indptr, indices = indptr.astype(np.int64), indices.astype(np.int64)
    if not (rows >= 0 and cols >= 0 and len(indptr) == rows + 1 and indptr[0] == 0
            and not np.any(np.diff(indptr) < 0) and indptr[-1] == len(indices) and len(data) == len(indices)
            and not (len(indices) and (indices.min() < 0 or indices.max() >= cols))):
        raise raw_error(path, f"a consistent {rows}x{cols} csr matrix",
                        f"{len(indptr)} row pointers and {len(indices)} entries")
    return data, indices, indptr, (rows, cols)


def dense_csr(path: str, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
              shape: tuple[int, int]) -> np.ndarray:
    """float32 [rows, cols] of checked csr parts; repeated entries summed, as scipy's `todense()` does. Refused
    when it would not fit in this host's memory (a damaged shape, most likely)."""
    refuse_beyond_memory(path, 4 * int(shape[0]) * int(shape[1]), f"expected a feature matrix that fits in memory, "
                         f"got shape {shape} ({{need}} GiB dense, {{memory}} GiB here)",
                         "replace it with the dataset's original file, or delete it to download it again")
    out = np.zeros(shape, dtype=np.float32)
    np.add.at(out, (np.repeat(np.arange(shape[0]), np.diff(indptr)), indices), data.astype(np.float32))
    return out


def _test_index(path: str) -> np.ndarray:
    try:
        with open(path, encoding="ascii") as f:
            return np.array([int(line) for line in f if line.strip()], dtype=np.int64)
    except (ValueError, UnicodeDecodeError) as exc:
        raise raw_error(path, "one integer per line", str(exc)[:80], _PLANETOID) from None


def _edges_from_graph(path: str, adjacency: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every listed pair, as PyG's `edge_index_from_dict` takes them (the CSR drops self-loops and repeats and
    refuses ids outside the graph)."""
    if not isinstance(adjacency, dict):
        raise _bad(path, f"a {type(adjacency).__name__} where the adjacency dict belongs")
    rows: list[int] = []
    cols: list[int] = []
    for key, value in adjacency.items():
        if not (isinstance(key, int) and isinstance(value, list) and all(isinstance(v, int) for v in value)):
            raise _bad(path, "an adjacency entry that is not int -> list of ints")
        rows += [key] * len(value)
        cols += value
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)


def read_planetoid(raw_dir: str, name: str) -> dict[str, np.ndarray]:
    """Read Cora / CiteSeer / PubMed from `raw_dir/ind.<name>.*` as PyG's `read_planetoid_data` builds them
    (edges as listed: self-loops and repeats are left to the CSR)."""
    paths = {p: os.path.join(raw_dir, f"ind.{name.lower()}.{p}") for p in PLANETOID_PARTS}
    loaded = {p: _unpickle(paths[p]) for p in ("x", "tx", "allx", "y", "ty", "ally", "graph")}
    tx, allx, y, ty, ally = (_dense(paths[p], loaded[p]) for p in ("tx", "allx", "y", "ty", "ally"))
    test_index = _test_index(paths["test.index"])
    if not len(test_index) or len(test_index) != len(tx) or len(ty) != len(tx) or len(ally) != len(allx) \
            or tx.shape[1] != allx.shape[1] or ty.shape[1] != ally.shape[1]:
        raise _bad(paths["tx"], f"parts of mismatched sizes (tx {tx.shape}, allx {allx.shape}, ty {ty.shape}, "
                                f"ally {ally.shape}, {len(test_index)} test ids)")
    sorted_test = np.sort(test_index)
    if name.lower() == "citeseer":
        # CiteSeer has isolated test-range ids that the files leave out: PyG adds them as zero rows.
        lo, span = int(test_index.min()), int(test_index.max() - test_index.min()) + 1
        if lo < len(allx) or span > 2 * len(test_index):  # the ids follow allx's; a few are missing, not most
            raise _bad(paths["test.index"], f"test ids {lo}..{lo + span - 1} for {len(test_index)} test rows after "
                                            f"{len(allx)} others")
        widened = [np.zeros((span, m.shape[1]), dtype=np.float32) for m in (tx, ty)]
        widened[0][sorted_test - lo], widened[1][sorted_test - lo] = tx, ty
        tx, ty = widened
    x = np.concatenate([allx, tx])
    labels = np.concatenate([ally, ty])
    if test_index.min() < 0 or test_index.max() >= len(x):
        raise raw_error(paths["test.index"], f"test ids in 0..{len(x) - 1}",
                        f"{int(test_index.min())}..{int(test_index.max())}", _PLANETOID)
    x[test_index] = x[sorted_test]
    y_idx = labels.argmax(axis=1).astype(np.int64)
    y_idx[test_index] = y_idx[sorted_test]
    num_nodes = len(y_idx)
    src, dst = _edges_from_graph(paths["graph"], loaded["graph"])
    train_n = len(y)
    as_ids = lambda ids: np.unique(ids[ids < num_nodes]).astype(np.int64)  # noqa: E731 (index_to_mask semantics)
    return {"x": x, "y": y_idx, "src": src, "dst": dst, "train_idx": as_ids(np.arange(train_n)),
            "val_idx": as_ids(np.arange(train_n, train_n + 500)), "test_idx": as_ids(test_index)}


def npz_arrays(path: str, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The named arrays of an npz, read with allow_pickle=False; whatever numpy or zipfile raises is the file's
    fault, so a DatasetError."""
    return read_npz(path, keys, raw_fail(path), catch=(Exception,))


def npy_array(path: str, expected: str) -> np.ndarray:
    """An .npy array read with allow_pickle=False."""
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise raw_error(path, expected, f"{type(exc).__name__}: {exc}") from None
    if not isinstance(array, np.ndarray):  # an npz archive: np.load opens it as an NpzFile
        array.close()
        raise raw_error(path, expected, "an npz archive")
    return array


def read_heterophilous(path: str) -> dict[str, np.ndarray]:
    """Read a heterophilous-graphs npz (Tolokers) as `HeterophilousGraphDataset.process` does (edges as stored:
    the caller symmetrises, as `to_undirected` does)."""
    keys = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")
    raw = npz_arrays(path, keys)
    x, edges = raw["node_features"], raw["edges"]
    if edges.ndim != 2 or edges.shape[1] != 2:  # ids outside 0..n-1: csr_from_edges refuses them
        raise raw_error(path, "edges [E, 2]", f"shape {edges.shape}")
    return {"x": x, "y": raw["node_labels"], "src": edges[:, 0].astype(np.int64), "dst": edges[:, 1].astype(np.int64),
            **{k: raw[k].astype(bool) for k in ("train_masks", "val_masks", "test_masks")}}


def scipy_parts(path: str, keys: tuple[str, ...], fmt: str) -> dict[str, np.ndarray]:
    """The arrays `keys` and `shape` of a scipy `save_npz` file of format `fmt` (read with allow_pickle=False)."""
    raw = npz_arrays(path, (*keys, "format", "shape"))
    got = raw["format"].item()
    got = got.decode("ascii", "replace") if isinstance(got, bytes) else str(got)
    if got != fmt:
        raise raw_error(path, f"a scipy {fmt} matrix (save_npz)", f"format '{got}'")
    return raw


def scipy_csr(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
    """A scipy `save_npz` csr file as (data, indices, indptr, shape), read with allow_pickle=False."""
    raw = scipy_parts(path, ("data", "indices", "indptr"), "csr")
    return checked_csr(path, raw["data"], raw["indices"], raw["indptr"], raw["shape"])


def read_imdb(raw_dir: str) -> dict[str, Any]:
    """Read MAGNN's IMDB files as PyG's `IMDB.process` builds them (without scipy or pickles), edge types in
    PyG's order."""
    p = lambda f: os.path.join(raw_dir, f)  # noqa: E731
    x = {t: dense_csr(p(f"features_{i}.npz"), *scipy_csr(p(f"features_{i}.npz")))
         for i, t in enumerate(IMDB_NODE_TYPES)}
    counts = {t: len(x[t]) for t in IMDB_NODE_TYPES}
    y = npy_array(p("labels.npy"), "a plain int npy array")
    if y.shape != (counts["movie"],) or y.dtype.kind not in "iu":
        raise raw_error(p("labels.npy"), f"{counts['movie']} int labels (one per movie of features_0.npz)",
                        f"{y.dtype} labels of shape {y.shape}")
    split = npz_arrays(p("train_val_test_idx.npz"), ("train_idx", "val_idx", "test_idx"))
    _, indices, indptr, shape = scipy_csr(p("adjM.npz"))
    total = sum(counts.values())
    if shape != (total, total):
        raise raw_error(p("adjM.npz"), f"{total}x{total} for {counts} nodes", f"{shape[0]}x{shape[1]}")
    start = dict(zip(IMDB_NODE_TYPES, np.cumsum([0, *counts.values()])[:-1].tolist()))
    row_of = np.repeat(np.arange(total), np.diff(indptr))
    edges: dict[tuple[str, str, str], np.ndarray] = {}
    for src, dst in product(IMDB_NODE_TYPES, IMDB_NODE_TYPES):
        r0, c0 = start[src], start[dst]
        sel = ((row_of >= r0) & (row_of < r0 + counts[src]) & (indices >= c0) & (indices < c0 + counts[dst]))
        if sel.any():  # stored order within each row, as scipy's slicing and tocoo() keep it
            edges[(src, "to", dst)] = np.stack([row_of[sel] - r0, indices[sel] - c0]).astype(np.int64)
    movies = counts["movie"]
    as_ids = lambda ids: np.unique(ids.astype(np.int64)[(ids >= 0) & (ids < movies)])  # noqa: E731
    return {"counts": counts, "x": x, "edges": edges, "y": y.astype(np.int64), "train_idx": as_ids(split["train_idx"]),
            "val_idx": as_ids(split["val_idx"]), "test_idx": as_ids(split["test_idx"])}
