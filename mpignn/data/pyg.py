"""A PyG `Data` or `HeteroData` in memory, checked as the npz format's arrays.

Imports neither torch nor torch-geometric: tensors are read through their own methods, the graph's kind by its
class name.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mpignn.data.graph import GraphData
from mpignn.data.hetero import edge_type_name
from mpignn.data.npz import graph_from_arrays
from mpignn.data.npz_checks import SPLIT_KEYS, failing
from mpignn.errors import DatasetError

__all__ = ["pyg_kind", "graph_from_pyg", "MEMORY_NAME"]

MEMORY_NAME = "memory"
"""The name (`GraphData.name`, the partition's `dataset`) of a graph that came from memory."""

def pyg_kind(obj: Any) -> str | None:
    """"Data" or "HeteroData" for a PyG graph of that class (or a subclass), else None."""
    for cls in type(obj).__mro__:
        if cls.__module__.startswith("torch_geometric.") and cls.__name__ in ("Data", "HeteroData"):
            return cls.__name__
    return None


def _numpy(value: Any) -> Any:
    """A tensor (any device; bfloat16 as float32) or array-like as a numpy array; None and scalars kept."""
    if value is None or isinstance(value, (int, float, np.ndarray)):
        return value
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def _split(store: Any, key: str, n: int | None, label: str) -> np.ndarray | None:
    """One split as node ids, from `train_idx` or `train_mask`; None when neither. n None: no x (refused next)."""
    value, name = _numpy(getattr(store, key, None)), key
    if value is None:
        name = key.replace("_idx", "_mask")
        value = _numpy(getattr(store, name, None))
    if value is None or value.dtype != np.bool_:
        return value
    if n is not None and value.shape != (n,):
        raise failing(label)(f"{name} must be a boolean mask of shape ({n},) (one entry per node) or 1-D node "
                             f"ids; got a boolean array of shape {value.shape}",
                             f"pick one split, e.g. {name}[:, 0]" if value.ndim == 2 else "one entry per row of x")
    return np.flatnonzero(value)


def _homo_arrays(data: Any, label: str) -> dict[str, np.ndarray]:
    arrays = {k: _numpy(getattr(data, k, None)) for k in ("edge_index", "x", "y")}
    n = int(np.shape(arrays["x"])[0]) if arrays["x"] is not None and np.ndim(arrays["x"]) else None
    arrays.update({k: _split(data, k, n, label) for k in SPLIT_KEYS})
    return {k: v for k, v in arrays.items() if v is not None}


def _hetero_arrays(data: Any, label: str) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    labelled = [t for t in data.node_types if getattr(data[t], "y", None) is not None]
    for t in data.node_types:
        store = data[t]
        n = store.num_nodes
        if n is None:
            raise failing(label)(f"node type {t} has no node count (no x, no num_nodes)", f"set data['{t}'].num_nodes")
        arrays[f"num_nodes__{t}"] = np.int64(n)
        if getattr(store, "x", None) is not None:
            arrays[f"x__{t}"] = _numpy(store.x)
        if t in labelled:
            arrays[f"y__{t}"] = _numpy(store.y)
    for et in data.edge_types:
        arrays[f"edge_index__{edge_type_name(et)}"] = _numpy(data[et].edge_index)
    if len(labelled) == 1:  # else the shared checks name the problem (exactly one y__T)
        store = data[labelled[0]]
        for key in SPLIT_KEYS:
            ids = _split(store, key, int(store.num_nodes), label)
            if ids is not None:
                arrays[key] = ids
    return arrays


def _refuse_edge_attributes(data: Any, label: str) -> None:
    """Refused, since partitioning drops them: a model that reads them must not train silently without them."""
    stores = [(None, data)] if pyg_kind(data) == "Data" else [(et, data[et]) for et in data.edge_types]
    for et, store in stores:
        for key in ("edge_attr", "edge_weight"):  # a partition re-orders the edges and does not carry these
            if getattr(store, key, None) is not None:
                where = f"data[{et!r}].{key}" if et else f"data.{key}"
                raise DatasetError(f"{label}: expected no edge attributes (a partition keeps the structure, features "
                                   f"and labels only); got {where}. HINT: del {where} to train on the structure, or "
                                   "put what a node needs from its edges into its features")


def graph_from_pyg(data: Any) -> GraphData:
    """Check and build the graph of a PyG `Data` or `HeteroData` as the npz format's arrays (docs/datasets.md), so
    it is refused exactly as the same arrays saved to an npz would be; messages start with "in-memory Data:"."""
    kind = pyg_kind(data)
    label = f"in-memory {kind}"
    if kind is None:
        raise DatasetError(f"expected a torch_geometric Data or HeteroData; got {type(data).__name__}. HINT: pass "
                           "the graph itself (e.g. dataset[0]) or a dataset name")
    _refuse_edge_attributes(data, label)
    arrays = _homo_arrays(data, label) if kind == "Data" else _hetero_arrays(data, label)
    num_classes = getattr(data, "num_classes", None)
    if isinstance(num_classes, (int, np.integer)):
        arrays["num_classes"] = np.int64(num_classes)
    return graph_from_arrays(label, arrays, MEMORY_NAME)
