"""Public datasets parsed from their raw files by mpignn itself (`raw_public`, `raw_benchmarks`, `ogb_raw`).

torch-geometric is imported inside the download helpers only, for its URLs: its `process()` never runs and its
`processed/` folder is never read, so nothing on disk can run code when a dataset loads.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.ogb_raw import OGB, load_ogb
from mpignn.data.raw_benchmarks import (FLICKR_FILES, REDDIT_FILES, read_flickr, read_gnn_benchmark, read_reddit,
                                        read_wikics)
from mpignn.data.raw_public import (IMDB_FILES, PLANETOID_PARTS, read_heterophilous, read_imdb,
                                    read_planetoid)
from mpignn.data.npz_checks import split_problem
from mpignn.errors import DatasetError

__all__ = ["PLANETOID", "HETEROPHILOUS", "HETERO", "OGB", "BENCHMARKS", "NUM_SPLITS", "load_planetoid",
           "load_heterophilous", "split_key", "load_ogb", "load_hetero_public", "load_benchmark", "class_split"]

PLANETOID = ("Cora", "CiteSeer", "PubMed")
HETEROPHILOUS = ("Tolokers",)
HETERO = ("IMDB",)  # heterogeneous; the target type is the one PyG labels
BENCHMARKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Amazon-Computers": ("Computers", ("amazon_electronics_computers.npz",)),
    "Amazon-Photo": ("Photo", ("amazon_electronics_photo.npz",)),
    "Coauthor-CS": ("CS", ("ms_academic_cs.npz",)),
    "Coauthor-Physics": ("Physics", ("ms_academic_phy.npz",)),
    "WikiCS": ("WikiCS", ("data.json",)),
    "Flickr": ("Flickr", FLICKR_FILES),
    "Reddit": ("Reddit", REDDIT_FILES),
}
"""Name -> (folder under ROOT, the raw files in its raw/); the folders are those of PyG's dataset classes."""
NUM_SPLITS = {"Tolokers": 10, "WikiCS": 20}
"""Datasets that ship several fixed splits, taken as `NAME:split=K` (default 0)."""
_GNN_BENCHMARK = ("Amazon-Computers", "Amazon-Photo", "Coauthor-CS", "Coauthor-Physics")


def _missing_error(name: str, folder: str, files: list[str], cause: BaseException) -> DatasetError:
    listed = ", ".join(files[:8]) + (" ..." if len(files) > 8 else "")
    return DatasetError(f"{name} is not under {folder} ({listed} missing) and downloading it failed "
                        f"({type(cause).__name__}: {str(cause)[:160]}). HINT: copy the raw files into {folder}, "
                        "or run once on a machine with network access and point --root at that folder")


def _ensure_raw(name: str, raw_dir: str, files: Sequence[str], fetch: Callable[[str], None]) -> None:
    """Download the missing raw files with `fetch(tmp_dir)`, then rename only the named ones into place, so a
    half-written download is never taken for a file."""
    missing = [f for f in files if not os.path.exists(os.path.join(raw_dir, f))]
    if not missing:
        return
    try:
        os.makedirs(raw_dir, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".download-", dir=raw_dir)
        try:
            fetch(tmp)
            for f in missing:
                os.replace(os.path.join(tmp, f), os.path.join(raw_dir, f))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except Exception as exc:  # offline download failures come in many types
        raise _missing_error(name, raw_dir, missing, exc) from None


def _graph(key: str, where: str, arrays: dict[str, np.ndarray], train: np.ndarray, val: np.ndarray,
           test: np.ndarray, **csr: bool) -> GraphData:
    """The GraphData of a public dataset's arrays (`csr`: `csr_from_edges`'s options), once they are sound.

    Raises:
        DatasetError: naming `where`: x and y of other node counts, labels that are not whole numbers, x not
            finite, splits that overlap, repeat or leave the graph, split nodes without a label, under 2 classes.
    """
    x, y = np.asarray(arrays["x"]), np.asarray(arrays["y"])
    splits = {"train_idx": train, "val_idx": val, "test_idx": test}
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y):
        problem = f"x [N, F] and y [N] of one node count, not x {x.shape} and y {y.shape}"
    elif y.dtype.kind not in "iuf" or (y.dtype.kind == "f" and not np.array_equal(y, np.round(y))):
        problem = f"labels that are whole numbers, not {y.dtype}"
    elif not np.isfinite(np.add.reduce(x, axis=None, dtype=np.float64)):
        problem = "finite features, not NaN or infinite ones"
    else:
        y = y.astype(np.int64)
        problem = _labels_problem(y, splits)
    if problem:
        raise _unsound(key, where, problem)
    rowptr, col = csr_from_edges(arrays["src"], arrays["dst"], len(y), where=where, **csr)
    return GraphData(name=key, rowptr=rowptr, col=col, x=x.astype(np.float32, copy=False), y=y,
                     train_idx=train, val_idx=val, test_idx=test, num_classes=int(y.max()) + 1)


def _labels_problem(y: np.ndarray, splits: dict[str, np.ndarray]) -> str | None:
    """What is wrong with int labels `y` and the splits over them (overlaps, repeats, ids outside, unlabelled
    split nodes, under 2 classes), or None."""
    found = split_problem(splits, len(y))
    unlabelled = None if found else next((k for k, ids in splits.items() if np.any(y[ids] < 0)), None)
    return (found[0] if found else f"{unlabelled} holds nodes without a label" if unlabelled else
            f"at least 2 classes, not labels up to {y.max()}" if y.max() < 1 else None)


def _unsound(key: str, where: str, problem: str) -> DatasetError:
    return DatasetError(f"{where}: expected {key.partition(':')[0]}'s arrays to be sound, got: {problem}. HINT: "
                        "replace the raw files with the dataset's originals (or delete them to download again)")


def load_planetoid(name: str, root: str) -> GraphData:
    """Load Cora / CiteSeer / PubMed with the public split from `root/<name>/raw` (downloaded if absent).

    Raises:
        DatasetError: raw files missing and not downloadable, or not what Planetoid ships.
    """
    raw_dir = os.path.join(root, name, "raw")
    files = [f"ind.{name.lower()}.{s}" for s in PLANETOID_PARTS]

    def fetch(tmp: str) -> None:
        from torch_geometric.data import download_url
        from torch_geometric.datasets import Planetoid

        for f in files:
            download_url(f"{Planetoid.url}/{f}", tmp, log=False)

    _ensure_raw(name, raw_dir, files, fetch)
    arrays = read_planetoid(raw_dir, name)
    return _graph(name, raw_dir, arrays, arrays["train_idx"], arrays["val_idx"], arrays["test_idx"])


def split_key(name: str, options: str) -> str:
    """The canonical key of `NAME[:split=K]` for a dataset of NUM_SPLITS: split 0 (the default) is plain `NAME`.

    Raises:
        DatasetError: options other than `split=K` with K in 0..NUM_SPLITS[name] - 1.
    """
    count = NUM_SPLITS[name]
    key, _, value = options.partition("=")
    if options and not (key == "split" and value.isdigit() and int(value) < count):
        raise DatasetError(f"{name} takes one option, split=K with K in 0..{count - 1} (its fixed splits); "
                           f"got '{options}'. HINT: --dataset {name}:split=3, or plain {name} for split 0")
    split = int(value) if options else 0
    return name if split == 0 else f"{name}:split={split}"


def load_heterophilous(key: str, root: str) -> GraphData:
    """Load Tolokers with fixed split K of `key` (`Tolokers[:split=K]`), downloaded if absent.

    Raises:
        DatasetError: the npz missing and not downloadable, or not plain arrays of the expected shapes.
    """
    name, _, options = key.partition(":")
    split = int(options.partition("=")[2]) if options else 0
    folder = name.lower().replace("-", "_")
    raw_dir = os.path.join(root, folder, "raw")

    def fetch(tmp: str) -> None:
        from torch_geometric.data import download_url
        from torch_geometric.datasets import HeterophilousGraphDataset

        download_url(f"{HeterophilousGraphDataset.url}/{folder}.npz", tmp, log=False)

    _ensure_raw(name, raw_dir, [f"{folder}.npz"], fetch)
    arrays = read_heterophilous(os.path.join(raw_dir, f"{folder}.npz"))
    n = len(arrays["y"])
    masks = [arrays[f"{part}_masks"] for part in ("train", "val", "test")]
    if any(m.shape != (NUM_SPLITS[name], n) for m in masks):
        raise DatasetError(f"{raw_dir}/{folder}.npz: expected masks of shape ({NUM_SPLITS[name]}, {n}), got "
                           f"{[m.shape for m in masks]}. HINT: replace it with the dataset's original file")
    train, val, test = (np.flatnonzero(m[split]).astype(np.int64) for m in masks)
    return _graph(key, f"{raw_dir}/{folder}.npz", arrays, train, val, test)


def load_hetero_public(name: str, root: str) -> GraphData:
    """Load IMDB (movies, directors, actors; movie genre) as PyG's `IMDB.process` does, downloaded if absent.

    Raises:
        DatasetError: raw files missing and not downloadable, or not plain arrays.
    """
    from mpignn.data.hetero import build_hetero

    raw_dir = os.path.join(root, name, "raw")

    def fetch(tmp: str) -> None:
        from torch_geometric.data import download_url, extract_zip
        from torch_geometric.datasets import IMDB

        extract_zip(download_url(IMDB.url, tmp, log=False), tmp, log=False)

    _ensure_raw(name, raw_dir, IMDB_FILES, fetch)
    raw = read_imdb(raw_dir)
    problem = _labels_problem(raw["y"], {k: raw[k] for k in ("train_idx", "val_idx", "test_idx")})
    if problem:
        raise _unsound(name, raw_dir, problem)
    return build_hetero(name, raw["counts"], raw["edges"], raw["x"], "movie", raw["y"],
                        {k: raw[k] for k in ("train_idx", "val_idx", "test_idx")})


def class_split(y: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted (train, val, test) ids for a graph that publishes none: each class cut 60/20/20 after a seeded
    shuffle, so the split is the same on every machine."""
    rng = np.random.default_rng(seed)
    parts: tuple[list[np.ndarray], ...] = ([], [], [])
    for c in np.unique(y[y >= 0]):
        ids = rng.permutation(np.flatnonzero(y == c))
        n_train, n_val = round(0.6 * len(ids)), round(0.2 * len(ids))
        for part, chunk in zip(parts, np.split(ids, [n_train, n_train + n_val])):
            part.append(chunk)
    return tuple(np.sort(np.concatenate(p)).astype(np.int64) if p else np.empty(0, np.int64)  # type: ignore
                 for p in parts)


def _benchmark_fetch(name: str, files: tuple[str, ...]) -> Callable[[str], None]:
    def fetch(tmp: str) -> None:
        from torch_geometric.data import download_google_url, download_url, extract_zip
        from torch_geometric import datasets

        if name in _GNN_BENCHMARK:
            url = (datasets.Amazon if name.startswith("Amazon") else datasets.Coauthor).url
            download_url(url + files[0], tmp, log=False)
        elif name == "WikiCS":
            download_url(f"{datasets.WikiCS.url}/{files[0]}", tmp, log=False)
        elif name == "Flickr":
            ids = (datasets.Flickr.adj_full_id, datasets.Flickr.feats_id, datasets.Flickr.class_map_id,
                   datasets.Flickr.role_id)
            for file_id, file in zip(ids, files):
                download_google_url(file_id, tmp, file, log=False)
        else:  # Reddit: DGL's zip holds both files
            extract_zip(download_url(datasets.Reddit.url, tmp, log=False), tmp, log=False)

    return fetch


def load_benchmark(key: str, root: str) -> GraphData:
    """Load a BENCHMARKS dataset (`WikiCS[:split=K]`) as PyG builds it, downloaded if absent.

    Raises:
        DatasetError: raw files missing and not downloadable, truncated or not what the dataset ships.
    """
    name, _, options = key.partition(":")
    folder, files = BENCHMARKS[name]
    raw_dir = os.path.join(root, folder, "raw")
    _ensure_raw(name, raw_dir, files, _benchmark_fetch(name, files))
    path = os.path.join(raw_dir, files[0])
    if name in _GNN_BENCHMARK:
        arrays = read_gnn_benchmark(path)
        train, val, test = class_split(arrays["y"])
        symmetric, no_loops = True, True
    elif name == "WikiCS":
        arrays = read_wikics(path)
        split = int(options.partition("=")[2]) if options else 0
        if len(arrays["train_masks"]) != NUM_SPLITS[name]:
            raise DatasetError(f"{path}: expected {NUM_SPLITS[name]} train and val masks, got "
                               f"{len(arrays['train_masks'])}. HINT: replace it with the dataset's original file")
        train, val, test = (np.flatnonzero(m).astype(np.int64) for m in
                            (arrays["train_masks"][split], arrays["val_masks"][split], arrays["test_mask"]))
        symmetric, no_loops = True, False  # to_undirected keeps self loops
    else:
        arrays = (read_flickr if name == "Flickr" else read_reddit)(raw_dir)
        train, val, test = arrays["train_idx"], arrays["val_idx"], arrays["test_idx"]
        symmetric, no_loops = False, False
    return _graph(key, raw_dir, arrays, train, val, test, drop_self_loops=no_loops, symmetric=symmetric)
