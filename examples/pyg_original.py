"""Run one of PyG's own example scripts, its dataset class swapped for mpignn's pickle-free readers, for
the comparisons in docs/from-pyg.md:

    PYTHONPATH=. /tmp/pygref/bin/python examples/pyg_original.py ORIGINAL.py DATA_ROOT SEED [SCRIPT ARGS...]

in a venv with torch-geometric and torch-sparse (docs/benchmarks.md, "PyG on torch-sparse"). `Planetoid(root,
name, transform)` gives the graph mpignn reads from DATA_ROOT/NAME/raw (the transform applied); `OGB_MAG(...)`
gives IMDB (DATA_ROOT/IMDB/raw) with its movies named 'paper', so a script's `data['paper']` lines run as they
are (its transform and preprocess are not applied: IMDB's edges run both ways already); OGB's
`PygNodePropPredDataset(name, root)` gives the dataset named by $OGB_AS (default Amazon-Photo) with its labels in
one column and `get_idx_split()`, as OGB's. The script runs as `__main__`, also importable under its file's name
(PyG's `Sequential` imports its caller by that name), after `torch.manual_seed(SEED)`. A CUDA-only script runs on
the CPU in one process (`--n_devices 1`) after the rewrites in `CPU`, which only move it there, time it from its
first step and read the seed count where torch-sparse's sampler gives no per-hop sizes (pyg-lib's does); each
one made is printed.
"""
import os
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
CPU = (("dist.init_process_group('nccl'", "dist.init_process_group('gloo'"), (".to(rank)", ".to('cpu')"),
       (", device_ids=[rank]", ""), ("torch.cuda.synchronize()", "pass"),
       ("warmup_steps = 20", "warmup_steps = 0"),  # papers100m_gcn.py's: a small graph has under 20 steps an epoch
       ("batch.num_sampled_nodes[0]", "batch.batch_size"))  # the same count; torch-sparse's sampler gives no sizes


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


def _data(g) -> Data:
    return Data(x=torch.from_numpy(np.asarray(g.x)), y=torch.from_numpy(np.asarray(g.y)).long(),
                edge_index=torch.from_numpy(g.edge_index()))


def planetoid(root, name, transform=None, **_):
    g = load_dataset(name, ROOT)
    data = _data(g)
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


def ogb_node_dataset(name=None, root=None, **_):
    g = load_dataset(os.environ.get("OGB_AS", "Amazon-Photo"), ROOT)
    data = _data(g)
    data.y = data.y.view(-1, 1)  # OGB's labels are a column
    dataset = _Dataset(data, g.num_features, g.num_classes)
    split = {{"val": "valid"}.get(key, key): torch.from_numpy(np.asarray(getattr(g, attr), dtype=np.int64))
             for key, attr in SPLITS}
    dataset.get_idx_split = lambda: dict(split)
    return dataset


def _as_ogb() -> None:
    """OGB's node datasets as mpignn reads them; a stand-in `ogb.nodeproppred` where ogb is not installed."""
    try:
        import ogb.nodeproppred as nodeproppred
    except ImportError:
        nodeproppred = sys.modules["ogb.nodeproppred"] = types.ModuleType("ogb.nodeproppred")
        sys.modules.setdefault("ogb", types.ModuleType("ogb")).nodeproppred = nodeproppred
    nodeproppred.PygNodePropPredDataset = ogb_node_dataset


def _on_cpu(source: str) -> str:
    for old, new in CPU if not torch.cuda.is_available() else ():
        if old in source:
            print(f"pyg_original: {old!r} -> {new!r}", file=sys.stderr)
            source = source.replace(old, new)
    return source


def main() -> None:
    global ROOT
    script, ROOT, seed = Path(sys.argv[1]).resolve(), sys.argv[2], int(sys.argv[3])
    datasets.Planetoid, datasets.OGB_MAG = planetoid, imdb_as_mag
    _as_ogb()
    module = types.ModuleType("__main__")
    module.__file__ = str(script)
    sys.modules["__main__"] = sys.modules[script.stem] = module
    torch.manual_seed(seed)
    argv, sys.argv = sys.argv, [str(script), *sys.argv[4:]]
    try:
        exec(compile(_on_cpu(script.read_text()), str(script), "exec"), module.__dict__)
    finally:
        sys.argv = argv


if __name__ == "__main__":
    main()
