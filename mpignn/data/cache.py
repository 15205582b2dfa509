"""The preprocessed-graph cache under `<root>/mpignn-cache/<name>/`: npy files plus meta.json, written as a
whole folder and renamed into place, so a crash never leaves a cache that a later run trusts."""
from __future__ import annotations

import os
from pathlib import Path

from mpignn.data.graph import GraphData
from mpignn.data.hetero import HeteroSchema
from mpignn.fileio import atomic_dir, load_npy, read_json, save_npy, write_json

__all__ = ["cache_dir", "save_cache", "load_cache"]

_ARRAYS = ("rowptr", "col", "x", "y", "train_idx", "val_idx", "test_idx")
FORMAT = 1


def cache_dir(root: str, name: str) -> Path:
    return Path(root) / "mpignn-cache" / name.replace("/", "_").replace(":", "_")


def save_cache(root: str, graph: GraphData) -> Path:
    final = cache_dir(root, graph.name)
    with atomic_dir(final) as tmp:
        for key in _ARRAYS:
            save_npy(tmp / f"{key}.npy", getattr(graph, key))
        if graph.schema is not None:
            save_npy(tmp / "edge_type.npy", graph.edge_type)
        write_json(tmp / "meta.json", {"format": FORMAT, "name": graph.name, "num_classes": graph.num_classes,
                                       "num_nodes": graph.num_nodes, "num_edges": graph.num_edges,
                                       "meta": graph.meta,
                                       "hetero": graph.schema.to_json() if graph.schema is not None else None})
    return final


def load_cache(root: str, name: str, mmap: bool = False) -> GraphData | None:
    """The cached graph, or None when there is no complete cache (meta.json is written last)."""
    folder = cache_dir(root, name)
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    meta = read_json(meta_path)
    if meta.get("format") != FORMAT or not all(os.path.isfile(folder / f"{k}.npy") for k in _ARRAYS):
        return None
    arrays = {k: load_npy(folder / f"{k}.npy", mmap=mmap) for k in _ARRAYS}
    if meta.get("hetero"):
        if not os.path.isfile(folder / "edge_type.npy"):
            return None
        arrays["edge_type"] = load_npy(folder / "edge_type.npy", mmap=mmap)
        arrays["schema"] = HeteroSchema.from_json(meta["hetero"])
    return GraphData(name=meta["name"], num_classes=int(meta["num_classes"]), meta=meta.get("meta", {}), **arrays)
