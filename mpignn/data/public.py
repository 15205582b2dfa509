"""Public datasets parsed from their raw files by mpignn itself (`raw_public`, `raw_benchmarks`, `ogb_raw`),
behind one table (`PUBLIC`): each dataset's folder, raw files, download and reader.

torch-geometric is imported inside the download helper only, for its URLs: its `process()` never runs and its
`processed/` folder is never read, so nothing on disk can run code when a dataset loads.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mpignn.data.graph import GraphData
from mpignn.data.hetero import build_hetero
from mpignn.data.ogb_raw import OGB, load_ogb
from mpignn.data.raw_benchmarks import (FLICKR_FILES, REDDIT_FILES, read_flickr, read_gnn_benchmark, read_reddit,
                                        read_wikics)
from mpignn.data.raw_public import (IMDB_FILES, PLANETOID_PARTS, fetch_staged, raw_error, read_heterophilous,
                                    read_imdb, read_planetoid)
from mpignn.data.npz_checks import SPLIT_KEYS, Fail, check_labels, check_splits, sound_graph
from mpignn.errors import DatasetError

__all__ = ["PUBLIC", "OGB", "NUM_SPLITS", "split_key", "load_public", "class_split"]

NUM_SPLITS = {"Tolokers": 10, "WikiCS": 20}
"""Datasets that ship several fixed splits, taken as `NAME:split=K` (default 0)."""
_RAW_HINT = "replace the raw files with the dataset's originals (or delete them to download again)"


def _graph(key: str, where: str, arrays: dict[str, np.ndarray], edges_at: str = "", **csr: bool) -> GraphData:
    """The GraphData of a public dataset's arrays (with its splits; `csr`: `csr_from_edges`'s options), once
    they are sound (else DatasetError naming `where`); edges outside the graph name `edges_at` (default `where`)."""
    x, y = np.asarray(arrays["x"]), np.asarray(arrays["y"])
    fail = _unsound(key, where)
    if x.ndim != 2 or y.ndim != 1 or len(x) != len(y) or x.dtype.kind not in "biuf":
        raise fail(f"x [N, F] and y [N] of one node count, x of numbers; not x {x.dtype} {x.shape} and y {y.shape}")
    if y.dtype.kind not in "iuf" or (y.dtype.kind == "f" and not np.array_equal(y, np.round(y))):
        raise fail(f"labels that are whole numbers, not {y.dtype}")
    return sound_graph(fail, key, x, y, (arrays["src"], arrays["dst"]), {k: arrays[k] for k in SPLIT_KEYS},
                       where=edges_at or where, hint=_RAW_HINT, **csr)


def _unsound(key: str, where: str) -> Fail:
    """The refusal of a public dataset's arrays (its hint, whatever the check: replace the files)."""
    return lambda problem, hint="": DatasetError(f"{where}: expected {key.partition(':')[0]}'s arrays to be sound, "
                                                 f"got: {problem}. HINT: {_RAW_HINT}")


def _mask_splits(key: str, path: str, arrays: dict[str, np.ndarray], names: Sequence[str],
                 split: int) -> dict[str, np.ndarray]:
    """train/val/test ids of fixed split `split` from the masks `names`: row `split` of a [K, N] mask (named
    `*_masks`, K the dataset's NUM_SPLITS), a [N] mask as it is; DatasetError for other shapes."""
    masks, n = [arrays[k] for k in names], len(arrays["y"])
    count = NUM_SPLITS[key.partition(":")[0]]
    if any(m.shape != ((count, n) if k.endswith("masks") else (n,)) for k, m in zip(names, masks)):
        raise raw_error(path, f"masks [{count}, {n}] of {count} fixed splits (or [{n}]) over the N = {n} labels",
                        f"shapes {[m.shape for m in masks]}")
    return {k: np.flatnonzero(m[split] if m.ndim == 2 else m).astype(np.int64) for k, m in zip(SPLIT_KEYS, masks)}


def _planetoid(key: str, raw_dir: str, path: str, split: int) -> GraphData:
    return _graph(key, raw_dir, read_planetoid(raw_dir, key), drop_self_loops=True,
                  edges_at=os.path.join(raw_dir, f"ind.{key.lower()}.graph"))


def _heterophilous(key: str, raw_dir: str, path: str, split: int) -> GraphData:
    arrays = read_heterophilous(path)
    splits = _mask_splits(key, path, arrays, ("train_masks", "val_masks", "test_masks"), split)
    return _graph(key, path, {**arrays, **splits}, symmetric=True)  # to_undirected


def _imdb(key: str, raw_dir: str, path: str, split: int) -> GraphData:
    """Movies, directors, actors; movie genre, as PyG's `IMDB.process` builds them."""
    raw = read_imdb(raw_dir)
    splits = {k: raw[k] for k in SPLIT_KEYS}
    check_splits(_unsound(key, raw_dir), splits, len(raw["y"]))
    check_labels(_unsound(key, raw_dir), raw["y"], splits, len(raw["y"]), None, "")
    return build_hetero(key, raw["counts"], raw["edges"], raw["x"], "movie", raw["y"], splits)


def _gnn_benchmark(key: str, raw_dir: str, path: str, split: int) -> GraphData:
    arrays = read_gnn_benchmark(path)
    return _graph(key, raw_dir, {**arrays, **dict(zip(SPLIT_KEYS, class_split(arrays["y"])))},
                  drop_self_loops=True, symmetric=True)


def _wikics(key: str, raw_dir: str, path: str, split: int) -> GraphData:
    arrays = read_wikics(path)
    splits = _mask_splits(key, path, arrays, ("train_masks", "val_masks", "test_mask"), split)
    return _graph(key, raw_dir, {**arrays, **splits}, symmetric=True)  # keeps self loops


def _as_stored(key: str, raw_dir: str, path: str, split: int) -> GraphData:
    """Flickr and Reddit: edges and splits as the files hold them."""
    read = read_flickr if key == "Flickr" else read_reddit
    return _graph(key, raw_dir, read(raw_dir))


@dataclass(frozen=True)
class PublicDataset:
    """Where a public dataset's raw files live, where they come from, and what builds its graph."""

    folder: str
    """Folder under ROOT (its raw files in `raw/`): the one of PyG's dataset class."""
    files: tuple[str, ...]
    source: str
    """The torch_geometric.datasets class whose URL (or Google Drive ids) the files come from."""
    how: str
    """"files": each file from `<url>/<file>`; "zip": the files unpacked from `<url>`; "google": by the
    class's `<file stem>_id`s."""
    build: Callable[[str, str, str, int], GraphData]
    """(key, raw dir, path of the first raw file, fixed split K) -> the graph."""

    def fetch(self, tmp: str) -> None:
        """Download the raw files into `tmp`."""
        from torch_geometric import datasets
        from torch_geometric.data import download_google_url, download_url, extract_zip

        cls = getattr(datasets, self.source)
        if self.how == "zip":
            extract_zip(download_url(cls.url, tmp, log=False), tmp, log=False)
            return
        for file in self.files:
            if self.how == "google":
                download_google_url(getattr(cls, f"{file.partition('.')[0]}_id"), tmp, file, log=False)
            else:
                download_url(f"{cls.url.rstrip('/')}/{file}", tmp, log=False)


PUBLIC: dict[str, PublicDataset] = {
    **{name: PublicDataset(name, tuple(f"ind.{name.lower()}.{p}" for p in PLANETOID_PARTS), "Planetoid", "files",
                           _planetoid) for name in ("Cora", "CiteSeer", "PubMed")},
    "Tolokers": PublicDataset("tolokers", ("tolokers.npz",), "HeterophilousGraphDataset", "files", _heterophilous),
    "IMDB": PublicDataset("IMDB", IMDB_FILES, "IMDB", "zip", _imdb),  # heterogeneous: the target is PyG's labelled type
    "Amazon-Computers": PublicDataset("Computers", ("amazon_electronics_computers.npz",), "Amazon", "files",
                                      _gnn_benchmark),
    "Amazon-Photo": PublicDataset("Photo", ("amazon_electronics_photo.npz",), "Amazon", "files", _gnn_benchmark),
    "Coauthor-CS": PublicDataset("CS", ("ms_academic_cs.npz",), "Coauthor", "files", _gnn_benchmark),
    "Coauthor-Physics": PublicDataset("Physics", ("ms_academic_phy.npz",), "Coauthor", "files", _gnn_benchmark),
    "WikiCS": PublicDataset("WikiCS", ("data.json",), "WikiCS", "files", _wikics),
    "Flickr": PublicDataset("Flickr", FLICKR_FILES, "Flickr", "google", _as_stored),
    "Reddit": PublicDataset("Reddit", REDDIT_FILES, "Reddit", "zip", _as_stored),  # DGL's zip holds both files
}
"""Name -> the dataset's entry, in the order `--dataset`'s list names them (the OGB graphs follow)."""


def split_key(name: str, options: str) -> str:
    """The canonical key of `NAME[:split=K]` for a dataset of NUM_SPLITS: split 0 (the default) is plain `NAME`."""
    count = NUM_SPLITS[name]
    key, _, value = options.partition("=")
    if options and not (key == "split" and value.isdigit() and int(value) < count):
        raise DatasetError(f"{name} takes one option, split=K with K in 0..{count - 1} (its fixed splits); "
                           f"got '{options}'. HINT: --dataset {name}:split=3, or plain {name} for split 0")
    split = int(value) if options else 0
    return name if split == 0 else f"{name}:split={split}"


def load_public(key: str, root: str) -> GraphData:
    """Load the public dataset of canonical `key` (`NAME[:split=K]`) as PyG builds it, downloaded if absent."""
    name, _, options = key.partition(":")
    if name in OGB:
        return load_ogb(name, root)
    entry = PUBLIC[name]
    raw_dir = os.path.join(root, entry.folder, "raw")
    missing = [f for f in entry.files if not os.path.exists(os.path.join(raw_dir, f))]
    if missing:
        fetch_staged(name, raw_dir, missing, entry.fetch, {f: os.path.join(raw_dir, f) for f in missing})
    split = int(options.partition("=")[2]) if options else 0
    return entry.build(key, raw_dir, os.path.join(raw_dir, entry.files[0]), split)


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
