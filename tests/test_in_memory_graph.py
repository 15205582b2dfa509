"""In-memory graphs (issue 39, item 2): `load_local_graph(rt, data)` with a PyG Data/HeteroData held by rank 0.

The parts a rank gets equal those of the same arrays saved to an npz and loaded by name (same method and seed),
batches train on them, and a bad graph gets the npz format's one-line error. Tier 2 (one rank in this process)
and Tier 3 (2 ranks under mpirun, w:in_memory_graph: parts over MPI in many chunks, errors on every rank).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData

from _graphs import small_graph
from _mpirun import run_mpi
from mpignn import runtime
from mpignn.training.loaders import make_loader
from mpignn.data import save_npz
from mpignn.data.synthetic_hetero import make_user_item
from mpignn.errors import ConfigError, DatasetError, is_agreed
from mpignn.partition.format import HETERO_FILES, PART_FILES
from mpignn.tasks import make_task

SPLITS = ("train_idx", "val_idx", "test_idx")


def _arrays(graph) -> dict:
    return {"edge_index": graph.edge_index(), "x": graph.x, "y": graph.y, "num_classes": np.int64(graph.num_classes),
            **{k: getattr(graph, k) for k in SPLITS}}


def to_data(arrays: dict, masks: bool = True) -> Data:
    """A PyG Data of npz-format arrays; the splits as boolean masks (train_mask, ...) or id tensors."""
    n = len(arrays["x"])
    data = Data(x=torch.from_numpy(arrays["x"]), y=torch.from_numpy(arrays["y"]),
                edge_index=torch.from_numpy(arrays["edge_index"]), num_classes=int(arrays["num_classes"]))
    for key in SPLITS:
        ids = torch.from_numpy(np.asarray(arrays[key]))
        if masks:
            data[key.replace("_idx", "_mask")] = torch.zeros(n, dtype=torch.bool).index_fill_(0, ids, True)
        else:
            data[key] = ids
    return data


def _parts_equal(a, b) -> None:
    assert a.part.meta.part_offsets == b.part.meta.part_offsets and a.num_classes == b.num_classes
    for name in PART_FILES + HETERO_FILES:
        x, y = getattr(a.part, name), getattr(b.part, name)
        assert (x is None and y is None) or np.array_equal(np.asarray(x), np.asarray(y)), name


@pytest.fixture(scope="module")
def graph():
    return small_graph(300, seed=2)


@pytest.fixture(scope="module")
def npz(graph, tmp_path_factory):
    path = tmp_path_factory.mktemp("npz") / "g.npz"
    np.savez(path, **_arrays(graph))
    return path


@pytest.mark.parametrize("masks", [True, False], ids=["masks", "id tensors"])
def test_parts_equal_the_npz_parts_and_batches_train(rt, graph, npz, masks):
    opts = dict(partition_method="random", seed=3, fanout=[4, 4], cache_size=0)
    mem = runtime.load_local_graph(rt, to_data(_arrays(graph), masks), **opts)
    named = runtime.load_local_graph(rt, f"npz:{npz}", str(npz.parent), **opts)
    _parts_equal(mem, named)
    assert mem.folder is None and mem.part.meta.dataset == "memory"
    model = torch.nn.Linear(mem.num_features, mem.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for batch in make_loader(rt, mem, "train", batch_size=64):
        loss = torch.nn.functional.cross_entropy(model(batch.x[:batch.batch_size]), batch.y[:batch.batch_size])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert len(losses) == -(-len(graph.train_idx) // 64) and all(np.isfinite(losses))


def test_link_task_holds_out_the_same_edges(rt, graph, npz):
    task = make_task(name="link")
    mem = runtime.load_local_graph(rt, to_data(_arrays(graph)), task=task, seed=4, cache_size=0)
    named = runtime.load_local_graph(rt, f"npz:{npz}", str(npz.parent), task=task, seed=4, cache_size=0)
    _parts_equal(mem, named)
    assert mem.task_data.keys() == named.task_data.keys()
    assert all(np.array_equal(mem.task_data[k], named.task_data[k]) for k in mem.task_data)


def test_hetero_data_parts_equal_the_npz_parts(rt, tmp_path):
    path = tmp_path / "h.npz"
    save_npz(str(path), make_user_item(num_items=300, num_users=80, edges_per_item=4))
    arrays = dict(np.load(path))
    data = HeteroData()
    for key, value in arrays.items():
        kind, _, name = key.partition("__")
        if kind == "edge_index":
            data[tuple(name.split("__"))].edge_index = torch.from_numpy(value)
        elif kind in ("x", "y", "num_nodes"):
            data[name][kind] = torch.from_numpy(value) if kind != "num_nodes" else int(value)
    for key in SPLITS:
        data["item"][key] = torch.from_numpy(arrays[key])
    opts = dict(seed=1, fanout=[3, 3], cache_size=0)
    mem = runtime.load_local_graph(rt, data, **opts)
    _parts_equal(mem, runtime.load_local_graph(rt, f"npz:{path}", str(tmp_path), **opts))
    assert mem.schema is not None and mem.part.type_rowptr is not None
    assert next(iter(make_loader(rt, mem, "train", batch_size=32)))["item"].batch_size > 0


def _bad(graph, case: str) -> dict:
    arrays = _arrays(graph)
    if case == "labels out of range":
        arrays["y"] = arrays["y"].copy()
        arrays["y"][7] = 99
    elif case == "edge ids out of range":
        arrays["edge_index"] = arrays["edge_index"].copy()
        arrays["edge_index"][0, 5] = graph.num_nodes + 4
    else:  # overlapping masks: a training node in the validation split too
        arrays["val_idx"] = np.union1d(arrays["val_idx"], arrays["train_idx"][:2])
    return arrays


@pytest.mark.parametrize("case", ["labels out of range", "edge ids out of range", "overlapping masks"])
def test_a_bad_data_gets_the_npz_error(rt, graph, tmp_path, case):
    arrays = _bad(graph, case)
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DatasetError) as named:
        runtime.load_local_graph(rt, f"npz:{tmp_path / 'bad.npz'}", str(tmp_path))
    with pytest.raises(DatasetError) as mem:
        runtime.load_local_graph(rt, to_data(arrays))
    message = str(mem.value)
    assert message.startswith("in-memory Data: ") and "\n" not in message and is_agreed(mem.value)
    assert message.removeprefix("in-memory Data: ") == str(named.value).removeprefix(f"{tmp_path / 'bad.npz'}: ")


@pytest.mark.parametrize("dataset,keywords,needle", [
    (None, {}, r"expected rank 0 to pass a dataset name or a torch_geometric Data/HeteroData; got None"),
    (7, {}, r"got int"),
    ("graph", {"root": "/data"}, r"expected no root with a graph held in memory .* got root='/data'"),
    ("graph", {"partitions": "/p"}, r"expected no partitions with a graph .* got partitions='/p'"),
    ("graph", {"splits": "/s.npz"}, r"expected no splits with a graph .* got splits='/s.npz'"),
    ("graph", {"cache_rows": 5}, r"expected GraphOptions fields as keywords"),
])
def test_refusals_are_one_agreed_line(rt, graph, dataset, keywords, needle):
    dataset = to_data(_arrays(graph)) if dataset == "graph" else dataset
    with pytest.raises(ConfigError, match=needle) as info:
        runtime.load_local_graph(rt, dataset, **keywords)
    assert "HINT:" in str(info.value) and "\n" not in str(info.value) and is_agreed(info.value)


def test_edge_attributes_are_refused_not_dropped(rt, graph):
    """A partition keeps structure, features and labels: `edge_attr` or `edge_weight` would vanish on the way
    (they were dropped without a word), so they are refused in one agreed line naming the attribute."""
    data = to_data(_arrays(graph))
    for key in ("edge_attr", "edge_weight"):
        data[key] = torch.ones(data.edge_index.shape[1])
        with pytest.raises(DatasetError, match=rf"expected no edge attributes .* got data\.{key}\. HINT: del data") as err:
            runtime.load_local_graph(rt, data)
        assert "\n" not in str(err.value) and is_agreed(err.value)
        del data[key]


def test_a_mask_of_the_wrong_length_is_named(rt, graph):
    data = to_data(_arrays(graph))
    data.val_mask = torch.zeros(graph.num_nodes + 1, dtype=torch.bool)
    with pytest.raises(DatasetError, match=r"in-memory Data: val_mask must be a boolean mask of shape \(300,\)"):
        runtime.load_local_graph(rt, data)


@pytest.mark.mpi
def test_two_ranks_get_the_npz_parts_over_mpi_and_errors_on_every_rank(graph, npz, tmp_path):
    for case in ("labels out of range", "edge ids out of range", "overlapping masks"):
        np.savez(tmp_path / f"{case.replace(' ', '-')}.npz", **_bad(graph, case))
    out = run_mpi("in_memory_graph.py", 2, npz, tmp_path, timeout=150)
    assert out.count("refused alike") == 2 * 6, out[-3000:]
