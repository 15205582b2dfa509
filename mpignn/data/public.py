"""Public datasets through torch-geometric's loaders: Planetoid and the heterophilous graphs (Tolokers).
OGB graphs are read from their raw files in `ogb_raw`.

torch-geometric is imported inside the functions. Raw files it downloads and parses itself are the one thing
mpignn lets it unpickle; what mpignn caches from them is npy.
"""
from __future__ import annotations

import os

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.ogb_raw import OGB, load_ogb
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


def load_planetoid(name: str, root: str) -> GraphData:
    """Cora / CiteSeer / PubMed with the public split, from `root/<name>/raw` (downloaded if absent)."""
    from torch_geometric.datasets import Planetoid

    raw_dir = os.path.join(root, name, "raw")
    files = [f"ind.{name.lower()}.{s}" for s in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")]
    missing = [f for f in files if not os.path.exists(os.path.join(raw_dir, f))]
    try:
        data = Planetoid(root, name)[0]
    except Exception as exc:  # offline download failures come in many types
        if missing:
            raise _missing_error(name, raw_dir, missing, exc) from None
        raise
    return _from_pyg(name, data, data.train_mask, data.val_mask, data.test_mask)


def _from_pyg(key: str, data: object, train_mask: object, val_mask: object, test_mask: object) -> GraphData:
    edge_index = data.edge_index.numpy()
    rowptr, col = csr_from_edges(edge_index[0], edge_index[1], data.num_nodes)
    as_idx = lambda mask: np.flatnonzero(mask.numpy()).astype(np.int64)  # noqa: E731
    return GraphData(name=key, rowptr=rowptr, col=col, x=data.x.numpy().astype(np.float32),
                     y=data.y.numpy().astype(np.int64), train_idx=as_idx(train_mask),
                     val_idx=as_idx(val_mask), test_idx=as_idx(test_mask),
                     num_classes=int(data.y.max()) + 1)


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
    """A HeterophilousGraphDataset graph (Tolokers) with fixed split K of `key` (`Tolokers[:split=K]`), from
    `root/<name lower-case>/raw/<name>.npz` (downloaded if absent). Edges are undirected, as PyG builds them."""
    from torch_geometric.datasets import HeterophilousGraphDataset

    name, _, options = key.partition(":")
    split = int(options.partition("=")[2]) if options else 0
    folder = name.lower().replace("-", "_")
    raw_dir = os.path.join(root, folder, "raw")
    missing = [] if os.path.exists(os.path.join(raw_dir, f"{folder}.npz")) else [f"{folder}.npz"]
    try:
        data = HeterophilousGraphDataset(root, name)[0]
    except Exception as exc:  # offline download failures come in many types
        if missing:
            raise _missing_error(name, raw_dir, missing, exc) from None
        raise
    return _from_pyg(key, data, data.train_mask[:, split], data.val_mask[:, split], data.test_mask[:, split])


_IMDB_FILES = ["adjM.npz", "features_0.npz", "features_1.npz", "features_2.npz", "labels.npy",
               "train_val_test_idx.npz"]


def load_hetero_public(name: str, root: str) -> GraphData:
    """IMDB (movies, directors, actors; movie genre) from `root/IMDB/raw` (downloaded if absent), through
    PyG's loader and `data.hetero.build_hetero`."""
    from torch_geometric.datasets import IMDB

    from mpignn.data.hetero import build_hetero

    folder = os.path.join(root, name)
    raw_dir = os.path.join(folder, "raw")
    missing = [f for f in _IMDB_FILES if not os.path.exists(os.path.join(raw_dir, f))]
    try:
        data = IMDB(folder)[0]
    except Exception as exc:  # offline download failures come in many types
        if missing:
            raise _missing_error(name, raw_dir, missing, exc) from None
        raise
    target = next(t for t in data.node_types if "y" in data[t])
    store = data[target]
    as_idx = lambda mask: np.flatnonzero(mask.numpy()).astype(np.int64)  # noqa: E731
    return build_hetero(name, {t: data[t].num_nodes for t in data.node_types},
                        {et: data[et].edge_index.numpy() for et in data.edge_types},
                        {t: data[t].x.numpy() for t in data.node_types if "x" in data[t]}, target,
                        store.y.numpy(), {"train_idx": as_idx(store.train_mask), "val_idx": as_idx(store.val_mask),
                                          "test_idx": as_idx(store.test_mask)})
