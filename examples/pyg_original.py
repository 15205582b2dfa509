"""Run one of PyG's own example scripts unchanged, its dataset class swapped for mpignn's pickle-free readers, for
the comparisons in docs/from-pyg.md:

    PYTHONPATH=. /tmp/pygref/bin/python examples/pyg_original.py ORIGINAL.py DATA_ROOT SEED [SCRIPT ARGS...]

in a venv with torch-geometric and torch-sparse (docs/benchmarks.md, "PyG on torch-sparse"). `Planetoid(root,
name, transform)` gives the graph mpignn reads from DATA_ROOT/NAME/raw (the transform applied); `OGB_MAG(...)`
gives IMDB (DATA_ROOT/IMDB/raw) with its movies named 'paper', so a script's `data['paper']` lines run as they
are (its transform and preprocess are not applied: IMDB's edges run both ways already). The script runs as
`__main__`, also importable under its file's name (PyG's `Sequential` imports its caller by that name), after
`torch.manual_seed(SEED)`.
"""
import sys
import types
from pathlib import Path

import numpy as np
import torch
import torch_geometric.datasets as datasets
from torch_geometric.data import Data, HeteroData

from mpignn.data import load_dataset

SPLITS = (("train", "train_idx"), ("val", "val_idx"), ("test", "test_idx"))
ROOT = "data"  # DATA_ROOT


class _Dataset(list):
    """What the scripts read of a PyG dataset: `[0]`, the feature and class counts."""

    def __init__(self, data, num_features: int, num_classes: int) -> None:
        super().__init__([data])
        self.num_features = self.num_node_features = num_features
        self.num_classes = num_classes


def _masks(store, ids: dict, n: int) -> None:
    for split, key in SPLITS:
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.from_numpy(np.asarray(ids[key], dtype=np.int64))] = True
        store[f"{split}_mask"] = mask


def planetoid(root, name, transform=None, **_):
    g = load_dataset(name, ROOT)
    data = Data(x=torch.from_numpy(np.asarray(g.x)), y=torch.from_numpy(np.asarray(g.y)).long(),
                edge_index=torch.from_numpy(g.edge_index()))
    _masks(data, {key: getattr(g, key) for _, key in SPLITS}, g.num_nodes)
    return _Dataset(transform(data) if transform is not None else data, g.num_features, g.num_classes)


def imdb_as_mag(root, *_, **__):
    g = load_dataset("IMDB", ROOT)
    schema, offsets, edges = g.schema, g.schema.offsets, g.edge_index()
    name = {"movie": "paper"}
    data = HeteroData()
    for k, t in enumerate(schema.node_types):
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        data[name.get(t, t)].x = torch.from_numpy(np.asarray(g.x[lo:hi, :schema.feature_dims[k]]))
    target = data[name.get(schema.target, schema.target)]
    lo, hi = int(offsets[schema.type_index(schema.target)]), int(offsets[schema.type_index(schema.target) + 1])
    target.y = torch.from_numpy(np.asarray(g.y[lo:hi])).long()
    _masks(target, {key: np.asarray(getattr(g, key)) - lo for _, key in SPLITS}, hi - lo)
    for e, (src, rel, dst) in enumerate(schema.edge_types):
        pick = edges[:, g.edge_type == e]
        shift = np.array([[offsets[schema.type_index(src)]], [offsets[schema.type_index(dst)]]])
        data[name.get(src, src), rel, name.get(dst, dst)].edge_index = torch.from_numpy(pick - shift)
    return _Dataset(data, schema.feature_dims[0], g.num_classes)


def main() -> None:
    global ROOT
    script, ROOT, seed = Path(sys.argv[1]).resolve(), sys.argv[2], int(sys.argv[3])
    datasets.Planetoid, datasets.OGB_MAG = planetoid, imdb_as_mag
    module = types.ModuleType("__main__")
    module.__file__ = str(script)
    sys.modules["__main__"] = sys.modules[script.stem] = module
    torch.manual_seed(seed)
    argv, sys.argv = sys.argv, [str(script), *sys.argv[4:]]
    try:
        exec(compile(script.read_text(), str(script), "exec"), module.__dict__)
    finally:
        sys.argv = argv


if __name__ == "__main__":
    main()
