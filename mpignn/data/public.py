"""Public datasets parsed from their raw files by mpignn itself (`raw_public`): Planetoid's pickles through an
allow-listed unpickler, Tolokers' and IMDB's npz/npy with `allow_pickle=False`. OGB graphs are read from their
raw files in `ogb_raw`.

torch-geometric is imported inside the download helper only, for its URLs and `download_url`: its `process()` never
runs and its `processed/` folder is never read, so nothing on disk can run code when a dataset loads.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.ogb_raw import OGB, load_ogb
from mpignn.data.raw_public import (IMDB_FILES, PLANETOID_PARTS, read_heterophilous, read_imdb,
                                    read_planetoid)
from mpignn.errors import DatasetError

__all__ = ["PLANETOID", "HETEROPHILOUS", "HETERO", "OGB", "load_planetoid", "load_heterophilous",
           "heterophilous_key", "load_ogb", "load_hetero_public"]

PLANETOID = ("Cora", "CiteSeer", "PubMed")
HETEROPHILOUS = ("Tolokers",)
HETERO = ("IMDB",)  # heterogeneous; the target type is the one PyG labels
_NUM_SPLITS = 10  # HeterophilousGraphDataset ships 10 fixed train/val/test splits


def _missing_error(name: str, folder: str, files: list[str], cause: BaseException) -> DatasetError:
    listed = ", ".join(files[:8]) + (" ..." if len(files) > 8 else "")
    return DatasetError(f"{name} is not under {folder} ({listed} missing) and downloading it failed "
                        f"({type(cause).__name__}: {str(cause)[:160]}). HINT: copy the raw files into {folder}, "
                        "or run once on a machine with network access and point --root at that folder")


def _ensure_raw(name: str, raw_dir: str, files: Sequence[str], fetch: Callable[[str], None]) -> None:
    """Download the missing raw files with `fetch(tmp_dir)` into a temporary folder beside `raw_dir`, then move
    only the named files into place (renamed, so a half-written download is never taken for a file)."""
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


def _graph(key: str, arrays: dict[str, np.ndarray], train: np.ndarray, val: np.ndarray,
           test: np.ndarray) -> GraphData:
    y = np.asarray(arrays["y"]).astype(np.int64)
    rowptr, col = csr_from_edges(arrays["src"], arrays["dst"], len(y))
    return GraphData(name=key, rowptr=rowptr, col=col, x=np.asarray(arrays["x"]).astype(np.float32), y=y,
                     train_idx=train, val_idx=val, test_idx=test, num_classes=int(y.max()) + 1)


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
    return _graph(name, arrays, arrays["train_idx"], arrays["val_idx"], arrays["test_idx"])


def heterophilous_key(name: str, options: str) -> str:
    """The canonical key of `Tolokers[:split=K]`: split 0 (the default) is plain `Tolokers`.

    Raises:
        DatasetError: options other than `split=K` with K in 0..9.
    """
    key, _, value = options.partition("=")
    if options and not (key == "split" and value.isdigit() and int(value) < _NUM_SPLITS):
        raise DatasetError(f"{name} takes one option, split=K with K in 0..{_NUM_SPLITS - 1} (its fixed splits); "
                           f"got '{options}'. HINT: --dataset {name}:split=3, or plain {name} for split 0")
    split = int(value) if options else 0
    return name if split == 0 else f"{name}:split={split}"


def load_heterophilous(key: str, root: str) -> GraphData:
    """Load a heterophilous graph (Tolokers) with fixed split K of `key` (`Tolokers[:split=K]`) from
    `root/<name lower-case>/raw/<name>.npz` (downloaded if absent). Edges are undirected, as PyG builds them.

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
    if any(m.shape != (_NUM_SPLITS, n) for m in masks):
        raise DatasetError(f"{raw_dir}/{folder}.npz: expected masks of shape ({_NUM_SPLITS}, {n}), got "
                           f"{[m.shape for m in masks]}. HINT: replace it with the dataset's original file")
    train, val, test = (np.flatnonzero(m[split]).astype(np.int64) for m in masks)
    return _graph(key, arrays, train, val, test)


def load_hetero_public(name: str, root: str) -> GraphData:
    """Load IMDB (movies, directors, actors; movie genre) from `root/IMDB/raw` (downloaded if absent), parsed as
    PyG's `IMDB.process` does and built by `data.hetero.build_hetero`.

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
    return build_hetero(name, raw["counts"], raw["edges"], raw["x"], "movie", raw["y"],
                        {k: raw[k] for k in ("train_idx", "val_idx", "test_idx")})
