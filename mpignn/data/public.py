"""Public datasets through their own loaders: Planetoid (torch-geometric) and OGB node property graphs.

torch-geometric and ogb are imported inside the functions. Raw files they download and parse themselves are
the one thing mpignn lets them unpickle; what mpignn caches from them is npy.
"""
from __future__ import annotations

import os

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.errors import DatasetError

__all__ = ["PLANETOID", "OGB", "load_planetoid", "load_ogb"]

PLANETOID = ("Cora", "CiteSeer", "PubMed")
OGB = ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M")


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
    edge_index = data.edge_index.numpy()
    rowptr, col = csr_from_edges(edge_index[0], edge_index[1], data.num_nodes)
    as_idx = lambda mask: np.flatnonzero(mask.numpy()).astype(np.int64)  # noqa: E731
    return GraphData(name=name, rowptr=rowptr, col=col, x=data.x.numpy().astype(np.float32),
                     y=data.y.numpy().astype(np.int64), train_idx=as_idx(data.train_mask),
                     val_idx=as_idx(data.val_mask), test_idx=as_idx(data.test_mask),
                     num_classes=int(data.y.max()) + 1)


def load_ogb(name: str, root: str) -> GraphData:
    """An ogbn node property graph through ogb's numpy loader (downloaded into `root` if absent)."""
    from ogb.nodeproppred import NodePropPredDataset
    import ogb.nodeproppred.dataset as ogb_dataset

    # ogb asks on stdin before downloads over 1 GB; MPI ranks have no stdin, and the user asked for it.
    ogb_dataset.decide_download = lambda url: True
    folder = os.path.join(root, name.replace("-", "_"))
    try:
        dataset = NodePropPredDataset(name=name, root=root)
    except Exception as exc:
        if not os.path.isdir(folder):
            raise _missing_error(name, folder, ["raw/ and processed/"], exc) from None
        raise
    graph, labels = dataset[0]
    split = dataset.get_idx_split()
    n = int(graph["num_nodes"])
    src, dst = graph["edge_index"]
    # OGB's citation graphs are directed; message passing wants both directions (as PyG's examples do).
    rowptr, col = csr_from_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), n, drop_self_loops=True)
    y = np.asarray(labels).reshape(-1)
    y = np.where(np.isnan(y), -1, y).astype(np.int64) if np.issubdtype(y.dtype, np.floating) else y.astype(np.int64)
    return GraphData(name=name, rowptr=rowptr, col=col, x=np.asarray(graph["node_feat"], dtype=np.float32), y=y,
                     train_idx=np.asarray(split["train"], dtype=np.int64),
                     val_idx=np.asarray(split["valid"], dtype=np.int64),
                     test_idx=np.asarray(split["test"], dtype=np.int64), num_classes=int(y.max()) + 1)
