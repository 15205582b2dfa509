"""Heterogeneous graphs: types as data through loading, partitioning, per-edge-type sampling, HeteroData
batches and the heterogeneous models."""
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from mpignn.data import load_dataset, save_npz
from mpignn.data.hetero import HeteroSchema, hop_fanouts, type_rowptr
from mpignn.data.synthetic_hetero import make_user_item
from mpignn.errors import ConfigError, DatasetError
from mpignn.exchange.features import FeatureStore
from mpignn.loader.hetero import HeteroLayout
from mpignn.loader.batches import BatchLoader
from mpignn.models import build_model, forward_batch
from mpignn.partition import format_report, load_partition, partition_graph
from mpignn.sampling import LocalHops, NeighborSampler

IMDB = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "IMDB"


@pytest.fixture(scope="module")
def graph():
    return make_user_item(num_items=600, num_users=150, edges_per_item=6)


def _loader(graph, fanouts, batch_size=60):
    t = graph.schema.num_etypes
    hops = LocalHops(graph.rowptr, graph.col, 0, type_rowptr(graph.rowptr, graph.edge_type, t), t)
    layout = HeteroLayout(graph.schema, graph.schema.offsets[:-1], np.arange(len(graph.schema.node_types)))
    return BatchLoader(NeighborSampler(hops, graph.num_nodes, fanouts), FeatureStore(graph.x, graph.y, 0),
                      graph.train_idx, batch_size, shuffle=False, layout=layout)


def test_edges_sorted_by_type_and_typed_runs(graph):
    t = graph.schema.num_etypes
    ptr = type_rowptr(graph.rowptr, graph.edge_type, t)
    assert np.array_equal(ptr[::t], graph.rowptr)
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.rowptr))
    key = dst * t + graph.edge_type
    assert np.all(np.diff(key) >= 0), "rows are sorted by edge type"
    kinds = np.searchsorted(graph.schema.offsets, graph.col, side="right") - 1
    src_of = np.array([graph.schema.type_index(e[0]) for e in graph.schema.edge_types])
    assert np.array_equal(kinds, src_of[graph.edge_type])


def test_per_edge_type_fanout_draws_that_many_of_each_type(graph):
    t = graph.schema.num_etypes
    ptr = type_rowptr(graph.rowptr, graph.edge_type, t)
    hops = LocalHops(graph.rowptr, graph.col, 0, ptr, t)
    seeds = np.arange(0, graph.num_nodes, 7)
    counts, nbrs = hops.sample(seeds, [2, -1], seed=3)
    counts = counts.reshape(-1, t)
    starts = np.concatenate([[0], np.cumsum(counts.reshape(-1))])
    for i, v in enumerate(seeds):
        for e, fan in enumerate([2, -1]):
            true = graph.col[ptr[v * t + e]:ptr[v * t + e + 1]]
            got = nbrs[starts[i * t + e]:starts[i * t + e + 1]]
            assert len(got) == (len(true) if fan < 0 else min(fan, len(true)))
            assert np.isin(got, true).all() and len(np.unique(got)) == len(got)


def test_hetero_batch_is_pyg_heterodata_with_seeds_first(graph):
    batch = next(iter(_loader(graph, [[3, 4], [2, 2]])))
    seeds = graph.train_idx[:60]
    item = batch["item"]
    assert item.batch_size == 60 and torch.equal(item.n_id[:60], torch.from_numpy(seeds))
    assert torch.equal(batch.y, item.y) and torch.equal(item.y[:60], torch.from_numpy(graph.y[seeds]))
    assert batch["user"].x.shape == (batch["user"].num_nodes, 1)  # featureless: a constant input
    assert torch.equal(item.x, torch.from_numpy(graph.x[item.n_id.numpy(), :16]))
    dst_of = {e: graph.rowptr for e in graph.schema.edge_types}
    for (s, r, d), store in zip(graph.schema.edge_types, (batch[e] for e in graph.schema.edge_types)):
        src, dst = batch[s].n_id[store.edge_index[0]].numpy(), batch[d].n_id[store.edge_index[1]].numpy()
        for u, v in zip(src, dst):  # every batch edge is a graph edge of that type
            assert u in graph.col[dst_of[(s, r, d)][v]:dst_of[(s, r, d)][v + 1]]
        assert sum(store.num_sampled_edges) == store.edge_index.shape[1]
    assert sum(item.num_sampled_nodes) == item.num_nodes


@pytest.mark.parametrize("kind", ["sage", "rgcn"])
def test_trimmed_hetero_model_equals_untrimmed_heteroconv(graph, kind):
    """Trimming per hop skips rows nobody reads: the seeds' logits equal PyG's HeteroConv over every node."""
    from torch_geometric.nn import HeteroConv

    torch.manual_seed(0)
    batch = next(iter(_loader(graph, [[3, 4], [2, 2]])))
    model = build_model(kind, {"item": 16, "user": 1}, 8, 4, 2, schema=graph.schema)
    got = forward_batch(model, batch)
    x = dict(batch.x_dict)
    for layer in range(2):
        convs = {tuple(k.split("__")): c for k, c in model.convs[layer].items()}
        out = HeteroConv(convs, aggr="sum")(x, batch.edge_index_dict)
        for t, root in model.roots[layer].items():
            out[t] = out[t] + root(x[t])
        x = {t: torch.relu(h) for t, h in out.items()} if layer == 0 else out
    assert got.shape == (60, 4)
    assert torch.allclose(got, x["item"][:60], atol=1e-5)


def test_hetero_models_reject_homogeneous_kinds(graph):
    with pytest.raises(ConfigError, match="heterogeneous"):
        build_model("gat", {"item": 16, "user": 1}, 8, 4, 2, schema=graph.schema)
    with pytest.raises(ConfigError, match="rgcn needs"):
        build_model("rgcn", 16, 8, 4, 2)


def test_npz_roundtrip_and_bad_input(graph, tmp_path):
    path = str(tmp_path / "g.npz")
    save_npz(path, graph)
    back = load_dataset(f"npz:{path}")
    assert back.schema == graph.schema
    assert np.array_equal(back.col, graph.col) and np.array_equal(back.edge_type, graph.edge_type)
    assert np.array_equal(back.x, graph.x) and np.array_equal(back.train_idx, graph.train_idx)
    arrays = dict(np.load(path))
    bad = {**arrays, "edge_index__item__rates__movie": arrays["edge_index__item__rates__user"]}
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(DatasetError, match="unknown node type"):
        load_dataset(f"npz:{tmp_path / 'bad.npz'}")
    for spoil, needle in (({"num_nodes__user": np.zeros(0, np.int64)}, r"num_nodes__user must be an int scalar "
                                                                           r"array; got int64 with shape "
                                                                           r"\(0,\)"),
                          ({"num_classes": np.array("abc")}, "num_classes must be an int scalar array"),
                          ({"y__item": arrays["y__item"].reshape(-1, 1)}, r"y__item must be an int 1-D array; got "
                                                                          r"int64 with shape \(\d+, 1\)"
                                                                          r".*reshape\(-1\)"),
                          ({"num_nodes__user": np.int64(10**12)}, "add up to .* nodes, more than this host's")):
        np.savez(tmp_path / "spoilt.npz", **{**arrays, **spoil})  # tracebacks or a flattened y before
        with pytest.raises(DatasetError, match=needle):
            load_dataset(f"npz:{tmp_path / 'spoilt.npz'}")
    del arrays["y__item"]
    np.savez(tmp_path / "nolabels.npz", **arrays)
    with pytest.raises(DatasetError, match="exactly one y__T"):
        load_dataset(f"npz:{tmp_path / 'nolabels.npz'}")


def test_partition_keeps_types_contiguous_and_reports_them(graph, tmp_path):
    rep = partition_graph(graph, 2, tmp_path / "p", seed=0)
    assert "type item: nodes per part" in format_report(rep)
    assert [sum(c) for c in rep["type_nodes"].values()] == list(graph.schema.node_counts)
    assert sum(rep["type_cut"].values()) == rep["edge_cut"] > 0
    assert "edge type user__rated_by__item:" in format_report(rep)
    node_map = np.load(tmp_path / "p" / "node_map.npy")
    t = graph.schema.num_etypes
    whole = np.diff(type_rowptr(graph.rowptr, graph.edge_type, t)).reshape(-1, t)
    for p in range(2):
        part = load_partition(tmp_path / "p", p)
        starts, kinds = part.meta.type_blocks()
        own = np.arange(part.lo, part.hi)
        kind = kinds[np.searchsorted(starts, own, side="right") - 1]
        inverse = np.argsort(node_map)[own]
        assert np.array_equal(kind, np.searchsorted(graph.schema.offsets, inverse, side="right") - 1)
        assert np.array_equal(np.diff(part.type_rowptr).reshape(-1, t), whole[inverse])


def test_edge_fanout_names_are_checked(graph):
    assert hop_fanouts([5, 3], {"user__rated_by__item": [2, 1]}, graph.schema) == [[5, 2], [3, 1]]
    with pytest.raises(ConfigError, match="does not have"):
        hop_fanouts([5, 3], {"user__likes__item": [2, 1]}, graph.schema)
    with pytest.raises(ConfigError, match="one edge type"):
        hop_fanouts([5, 3], {"a__b__c": [2, 1]}, None)
    assert HeteroSchema.from_json(graph.schema.to_json()) == graph.schema


@pytest.mark.skipif(not IMDB.is_dir(), reason="needs ../shared/datasets/IMDB")
def test_imdb_loads_from_raw_files(tmp_path):
    shutil.copytree(IMDB, tmp_path / "IMDB")
    for f in (tmp_path / "IMDB").rglob("*"):
        f.chmod(0o644 if f.is_file() else 0o755)
    g = load_dataset("imdb", str(tmp_path))
    assert g.schema.node_types == ("movie", "director", "actor") and g.schema.target == "movie"
    assert g.schema.node_counts == (4278, 2081, 5257) and g.num_edges == 34212
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (400, 400, 3478) and g.num_classes == 3
    assert load_dataset("IMDB", str(tmp_path)).schema == g.schema  # from the cache
