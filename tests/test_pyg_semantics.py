"""mpignn's loaders held to the semantics of PyG's own loader tests (`test/loader/test_neighbor_loader.py`,
`test_link_neighbor_loader.py`) where they apply to a partitioned graph: batch attributes, id spaces, seed
order, -1 fanouts giving the whole graph's outputs, negative shapes and label dtypes. What does not apply is
refused in one line and listed in docs/api.md ("What PyG's loaders take that these do not"). PyG's loaders
cannot run here (no pyg-lib, no torch-sparse), so their assertions are restated, on one process."""
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import SAGEConv, to_hetero

from mpignn.data import load_dataset, save_npz
from mpignn.data.synthetic_hetero import make_user_item
from mpignn.errors import ConfigError
from mpignn.runtime import LinkNeighborLoader, NeighborLoader, load_local_graph

GRAPH = "synthetic:num_nodes=300,avg_degree=6,num_features=6"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "api.md"


@pytest.fixture(scope="module")
def homo(rt, tmp_path_factory):
    graph = load_local_graph(rt, GRAPH, str(tmp_path_factory.mktemp("sem")), cache_size=0, feature_norm="none")
    return graph, load_dataset(GRAPH)


@pytest.fixture(scope="module")
def hetero(rt, tmp_path_factory):
    root = tmp_path_factory.mktemp("sem_hetero")
    save_npz(str(root / "ui.npz"), make_user_item(num_items=300, num_users=80, edges_per_item=4))
    graph = load_local_graph(rt, f"npz:{root / 'ui.npz'}", str(root), cache_size=0, feature_norm="none")
    return graph, dict(np.load(root / "ui.npz"))


def _pairs(edge_index):
    return set(map(tuple, np.asarray(edge_index).T.tolist()))


class SAGE(torch.nn.Module):
    def __init__(self, out_channels):
        super().__init__()
        self.conv1, self.conv2 = SAGEConv((-1, -1), 16), SAGEConv((-1, -1), out_channels)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def test_node_batches_are_subgraphs_with_seeds_first(homo):
    """PyG's test_homogeneous_neighbor_loader: len, batch_size, edges within the batch and of the graph."""
    graph, data = homo
    loader = NeighborLoader(graph, [5, 5], input_nodes=None, batch_size=20)
    assert len(loader) == -(-data.num_nodes // 20)
    edges = _pairs(data.edge_index())
    for batch in loader:
        assert isinstance(batch, Data) and batch.batch_size == 20
        assert batch.n_id.shape == (batch.num_nodes,) and batch.x.shape[0] == batch.num_nodes
        assert 0 <= int(batch.edge_index.min()) and int(batch.edge_index.max()) < batch.num_nodes
        assert _pairs(batch.n_id[batch.edge_index]) <= edges  # a subgraph of the dataset's graph
        assert np.allclose(batch.x.numpy(), np.asarray(data.x)[batch.n_id.numpy()])


def test_minus_one_fanouts_give_the_whole_graphs_outputs(homo):
    """PyG's test_homogeneous_neighbor_loader_on_cora: num_neighbors=[-1, -1] batches give each seed the output
    the model gives it on the whole graph (the seeds in the order given)."""
    graph, data = homo
    model = SAGE(4)
    seeds = torch.tensor([5, 6, 7, 250])
    batch = next(iter(NeighborLoader(graph, [-1, -1], input_nodes=seeds, batch_size=4)))
    assert batch.n_id[:4].tolist() == seeds.tolist() and batch.input_id.tolist() == [0, 1, 2, 3]
    with torch.no_grad():
        whole = model(torch.from_numpy(np.asarray(data.x)), torch.from_numpy(data.edge_index()))[seeds]
        part = model(batch.x, batch.edge_index)[:batch.batch_size]
    assert torch.allclose(whole, part, atol=1e-5)


def test_heterogeneous_node_batches_and_a_to_hetero_model_on_minus_one_fanouts(hetero):
    """PyG's test_heterogeneous_neighbor_loader(_on_cora): every type in the batch, each edge type's ids
    within its end types' stores and of the graph; a to_hetero model on [-1, -1] batches equals it on the
    whole HeteroData (the exact evaluation for models `inference` cannot walk)."""
    graph, arrays = hetero
    node_types, edge_types = graph.metadata()
    whole = HeteroData()
    for t in node_types:
        n = int(arrays[f"num_nodes__{t}"])
        whole[t].x = torch.from_numpy(arrays[f"x__{t}"]) if f"x__{t}" in arrays else torch.ones(n, 1)
    for e in edge_types:
        whole[e].edge_index = torch.from_numpy(arrays["edge_index__" + "__".join(e)])
    seeds = torch.tensor([3, 40, 299])
    batch = next(iter(NeighborLoader(graph, [-1, -1], input_nodes=("item", seeds), batch_size=3)))
    assert isinstance(batch, HeteroData) and set(batch.node_types) == set(node_types)
    assert set(batch.edge_types) == set(edge_types) and batch["item"].batch_size == 3
    for src, rel, dst in edge_types:
        ei = batch[src, rel, dst].edge_index
        assert int(ei[0].max()) < batch[src].num_nodes and int(ei[1].max()) < batch[dst].num_nodes
        got = torch.stack([batch[src].n_id[ei[0]], batch[dst].n_id[ei[1]]])
        assert _pairs(got) <= _pairs(whole[src, rel, dst].edge_index)
    model = to_hetero(SAGE(4), whole.metadata(), aggr="sum")
    with torch.no_grad():
        full = model(whole.x_dict, whole.edge_index_dict)["item"][seeds]
        part = model(batch.x_dict, batch.edge_index_dict)["item"][:3]
    assert torch.allclose(full, part, atol=1e-5)


def test_link_batches_as_pygs(homo):
    """PyG's test_homo_link_neighbor_loader_basic and _edge_label: len, input_id per batch, positives in the
    batch's edges under -1 fanouts, the local index mapping to the input edges, label dtypes kept."""
    graph, data = homo
    edges = torch.from_numpy(data.edge_index()[:, :200])
    loader = LinkNeighborLoader(graph, [-1, -1], edge_label_index=edges, batch_size=20, shuffle=True)
    assert len(loader) == 200 // 20
    given = _pairs(edges)
    for batch in loader:
        assert batch.input_id.numel() == 20 and batch.edge_label_index.shape == (2, 20)
        assert _pairs(batch.edge_label_index) <= _pairs(batch.edge_index)  # each positive was sampled
        assert _pairs(batch.n_id[batch.edge_label_index]) <= given
    ratio = LinkNeighborLoader(graph, [-1, -1], edge_label_index=edges, batch_size=20, neg_sampling_ratio=1.0)
    batch = next(iter(ratio))
    assert batch.edge_label_index.shape == (2, 40) and batch.edge_label.dtype == torch.float
    assert batch.edge_label[:20].eq(1).all() and batch.edge_label[20:].eq(0).all()
    longs = LinkNeighborLoader(graph, [-1, -1], edge_label_index=edges, edge_label=torch.ones(200, dtype=torch.long),
                               batch_size=20, neg_sampling_ratio=1.0)
    batch = next(iter(longs))
    assert batch.edge_label.dtype == torch.long and batch.edge_label[20:].eq(0).all()
    triplet = LinkNeighborLoader(graph, [-1, -1], edge_label_index=edges, batch_size=20,
                                 neg_sampling={"mode": "triplet", "amount": 2})
    batch = next(iter(triplet))
    assert batch.src_index.shape == (20,) and batch.dst_pos_index.shape == (20,)
    assert batch.dst_neg_index.shape == (20, 2) and "edge_label_index" not in batch


def test_heterogeneous_link_batches_as_pygs(hetero):
    """PyG's test_hetero_link_neighbor_loader_basic: `input_type`, the edge type as (source, target), sizes."""
    graph, arrays = hetero
    rated = arrays["edge_index__user__rated_by__item"]
    loader = LinkNeighborLoader(graph, [-1, -1], edge_label_index=("user", "item"), batch_size=20,
                                neg_sampling_ratio=1.0, shuffle=True)
    assert len(loader) == -(-rated.shape[1] // 20)
    for batch in loader:
        store = batch["user", "rated_by", "item"]
        assert batch.input_type == ("user", "rated_by", "item")
        p = store.input_id.numel()
        assert store.edge_label_index.shape == (2, 2 * p)
        assert store.edge_label[:p].eq(1).all() and store.edge_label[p:].eq(0).all()
        assert _pairs(store.edge_label_index[:, :p]) <= _pairs(store.edge_index)
    with pytest.raises(ConfigError, match="1 edge types join them|0 edge types join them"):
        LinkNeighborLoader(graph, [2], edge_label_index=("item", "item"))


NOT_TAKEN = [  # (loader, keyword arguments, words of the one-line refusal)
    ("node", {"time_attr": "time"}, "unknown keyword 'time_attr'"),
    ("node", {"directed": False}, "unknown keyword 'directed'"),
    ("node", {"disjoint": True}, "unknown keyword 'disjoint'"),
    ("node", {"subgraph_type": "bidirectional"}, "unknown keyword 'subgraph_type'"),
    ("node", {"filter_per_worker": True}, "unknown keyword 'filter_per_worker'"),
    ("node", {"num_neighbors": []}, "one hop at least"),
    ("link", {"edge_label_time": torch.zeros(2)}, "takes edge_label_time at PyG's default"),
    ("link", {"time_attr": "time"}, "takes time_attr at PyG's default"),
    ("link", {"disjoint": True}, "takes disjoint at PyG's default"),
    ("link", {"subgraph_type": "bidirectional"}, "takes subgraph_type at PyG's default"),
    ("link", {"num_neighbors": []}, "one hop at least"),
    ("data", {}, "needs a graph from mpignn.runtime.load_local_graph"),
    ("call", {}, "is not called on chosen seeds"),
]


@pytest.mark.parametrize("kind, kwargs, words", NOT_TAKEN, ids=[f"{k}-{next(iter(a), k)}" for k, a, _ in NOT_TAKEN])
def test_what_does_not_apply_is_refused_in_one_line_and_listed(homo, kind, kwargs, words):
    graph, data = homo
    args = {"num_neighbors": [2], **kwargs}
    with pytest.raises(ConfigError) as err:
        if kind == "link":
            LinkNeighborLoader(graph, edge_label_index=torch.tensor([[0, 1], [2, 3]]), **args)
        elif kind == "node":
            NeighborLoader(graph, **args)
        elif kind == "call":  # PyG's loader(index): a batch of chosen seeds
            NeighborLoader(graph, [2], batch_size=4)(torch.tensor([1, 2]))
        else:  # PyG's own first argument: a Data, or a (FeatureStore, GraphStore) pair
            NeighborLoader(Data(x=torch.zeros(3, 1), edge_index=torch.zeros(2, 0, dtype=torch.long)), [2])
    assert words in str(err.value) and "HINT" in str(err.value) and "\n" not in str(err.value)
    listed = DOCS.read_text().split("What PyG's loaders take that these do not")[1].split("\n\n")[0]
    name = next(iter(kwargs), kind)
    assert f"`{name}`" in listed, f"docs/api.md does not list {name}"
