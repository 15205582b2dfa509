"""`mpignn.runtime.inference(model, graph)` (issue 39 item 5): exact layer-wise inference of a user's PyG model
(GraphSAGE, GCN, GAT, GIN, a reddit-style `.convs` module) and of mpignn's own, equal to the model applied to
the whole graph on 1 rank (Tier 2, in-process) and on 2 and 3 ranks (Tier 3, w:user_inference); what it cannot
walk exactly is refused in one agreed line with a HINT."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv, GraphConv, SAGEConv
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

from _mpirun import WORKERS, run_mpi
from mpignn.errors import ConfigError, is_agreed
from mpignn.data import load_dataset
from mpignn.models import build_model
from mpignn.models.link import LinkModel
from mpignn.runtime import load_local_graph
from mpignn.runtime import inference

sys.path.insert(0, str(WORKERS))
from user_inference import GRAPH, MODELS, RedditSAGE, whole_forward  # noqa: E402


@pytest.fixture(scope="module")
def graph(rt, tmp_path_factory):
    return load_local_graph(rt, GRAPH, str(tmp_path_factory.mktemp("user_inference")), fanout=[3, 3], cache_size=0)


@pytest.fixture(scope="module")
def whole():
    data = load_dataset(GRAPH)
    return torch.from_numpy(data.x), torch.from_numpy(data.edge_index())


def _want(model: torch.nn.Module, whole, node_id: np.ndarray) -> np.ndarray:
    return whole_forward(model, *whole)[node_id]


def _check(model, graph, whole, **kwargs) -> None:
    want = _want(model, whole, graph.node_id)
    got = inference(model.train(), graph, batch_size=37, **kwargs)
    assert model.training, "the model's mode is restored"
    assert isinstance(got, torch.Tensor) and got.device.type == "cpu" and got.shape == want.shape
    assert np.allclose(got.numpy(), want, atol=1e-5, rtol=1e-4), np.abs(got.numpy() - want).max()


@pytest.mark.parametrize("name", list(MODELS))
def test_pyg_models_equal_the_whole_graph_forward(graph, whole, name):
    torch.manual_seed(0)
    _check(MODELS[name](graph.num_features, graph.num_classes), graph, whole)


def _running_stats(model: torch.nn.Module) -> torch.nn.Module:
    """BatchNorms with statistics other than (0, 1), so eval-mode normalisation shows."""
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    return model


@pytest.mark.parametrize("make", [
    lambda i, o: GraphSAGE(i, 8, 3, o, norm="batch_norm", act="elu", act_first=True, jk="last", aggr="max"),
    lambda i, o: GCN(i, 8, 2, o, norm="layer_norm", norm_kwargs={"mode": "node"}, act="tanh"),
    lambda i, o: GAT(i, 8, 2, o, heads=2, v2=True),
    lambda i, o: GIN(i, 8, 2, o, norm="batch_norm"),
    lambda i, o: GraphSAGE(i, 8, 2, None, jk="last"),
], ids=["sage-norm-elu-jk-max", "gcn-layer-norm", "gatv2", "gin-batch-norm", "sage-no-out"])
def test_basic_gnn_options_are_walked(graph, whole, make):
    torch.manual_seed(1)
    _check(_running_stats(make(graph.num_features, graph.num_classes)), graph, whole)


@pytest.mark.parametrize("kind", ["sage", "gat", "gcn"])
def test_mpignn_models_equal_the_whole_graph_forward(graph, whole, kind):
    torch.manual_seed(2)
    _check(build_model(kind, graph.num_features, 8, graph.num_classes, 2), graph, whole)


def test_ddp_and_link_models_are_unwrapped(graph, whole):
    torch.manual_seed(3)
    model = GraphSAGE(graph.num_features, 8, 2, graph.num_classes)
    _check(torch.nn.parallel.DistributedDataParallel(model), graph, whole)
    link = LinkModel(build_model("sage", graph.num_features, 8, 8, 2), 8)
    got = inference(link, graph)
    assert np.allclose(got.numpy(), _want(link.encoder, whole, graph.node_id), atol=1e-5)


class _EluSAGE(RedditSAGE):
    def forward(self, x, edge_index):
        return self.convs[1](torch.nn.functional.elu(self.convs[0](x, edge_index)), edge_index)


@pytest.mark.parametrize("act", ["elu", torch.nn.functional.elu])
def test_act_names_a_convs_modules_activation(graph, whole, act):
    torch.manual_seed(4)
    _check(_EluSAGE(graph.num_features, 8, graph.num_classes), graph, whole, act=act)


class _Convs(torch.nn.Module):
    def __init__(self, *convs: torch.nn.Module, **extra: torch.nn.Module) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(convs)
        for name, module in extra.items():
            setattr(self, name, module)


@pytest.mark.parametrize("make, kwargs, match", [
    (lambda f, c: torch.nn.Linear(f, c), {}, "got Linear, which has no .convs ModuleList. HINT"),
    (lambda f, c: _Convs(GraphConv(f, c)), {}, r"convs\[0\] is GraphConv. HINT"),
    (lambda f, c: GraphSAGE(f, 8, 2, c, jk="cat"), {}, "jk='cat'.*HINT: build it with jk=None"),
    (lambda f, c: GraphSAGE(f, 8, 2, c, norm="layer_norm"), {}, r"norms\.0 \(LayerNorm\) normalises over.*HINT"),
    (lambda f, c: GCN(f, 8, 2, c, norm="graph_norm"), {}, r"\(GraphNorm\) normalises over the nodes.*HINT"),
    (lambda f, c: GraphSAGE(f, 8, 2, c, norm=torch.nn.BatchNorm1d(8, track_running_stats=False)), {},
     r"\(BatchNorm1d\) normalises.*HINT"),
    (lambda f, c: _Convs(SAGEConv(f, c), lin=torch.nn.Linear(c, c)), {}, "'lin' \\(Linear\\) has weights.*HINT"),
    (lambda f, c: _Convs(SAGEConv(f, c, aggr="lstm")), {}, "LSTMAggregation. HINT"),
    (lambda f, c: _Convs(GCNConv(f, c, improved=True)), {}, "improved=True.*HINT"),
    (lambda f, c: GraphSAGE(-1, 8, 2, c), {}, "lazy ones.*HINT"),
    (lambda f, c: GraphSAGE(f + 1, 8, 2, c), {}, f"takes {6 + 1} numbers per node; the graph gives 6.*HINT"),
    (lambda f, c: GraphSAGE(f, 8, 2, c), {"act": "relu"}, "GraphSAGE carries its own. HINT: leave act out"),
    (lambda f, c: RedditSAGE(f, 8, c), {"act": "no-such"}, "act= expects.*'no-such'. HINT"),
    (lambda f, c: RedditSAGE(f, 8, c), {"batch_size": 0}, "batch_size expects a positive int.*got 0. HINT"),
])
def test_what_cannot_be_walked_is_refused_in_one_agreed_line(graph, make, kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        inference(make(graph.num_features, graph.num_classes), graph, **kwargs)
    assert is_agreed(info.value) and "\n" not in str(info.value)


def test_a_user_model_on_a_heterogeneous_graph_is_refused(rt, tmp_path):
    from mpignn.data import save_npz
    from mpignn.data.synthetic_hetero import make_user_item

    save_npz(str(tmp_path / "ui.npz"), make_user_item(num_items=120, num_users=40, num_features=4))
    hetero = load_local_graph(rt, f"npz:{tmp_path / 'ui.npz'}", str(tmp_path / "data"), fanout=[3, 3],
                              cache_size=0)
    with pytest.raises(ConfigError, match="heterogeneous graph expects mpignn's HeteroGNN; got GraphSAGE.*HINT") as e:
        inference(GraphSAGE(4, 8, 2, hetero.num_classes), hetero)
    assert is_agreed(e.value)
    model = build_model("sage", hetero.in_channels(), 8, hetero.num_classes, 2, schema=hetero.schema)
    got = inference(model, hetero)  # mpignn's own: the classified type's rows, the others zeros
    items = hetero.part.meta.parts[0]["type_counts"][0]
    assert got.shape == (len(hetero.node_id), hetero.num_classes) and got[:items].abs().sum() > 0
    assert not got[items:].any()


def test_gather_nodes_puts_every_row_at_its_dataset_id(rt, graph, whole):
    from mpignn.errors import ConfigError
    from mpignn.runtime import gather_nodes

    model = MODELS["sage"](graph.num_features, graph.num_classes)
    every = gather_nodes(rt, graph, inference(model, graph))
    assert isinstance(every, torch.Tensor) and np.allclose(every.numpy(), whole_forward(model, *whole), atol=1e-5)
    rows = gather_nodes(rt, graph, graph.node_id * 10)  # an array in, an array out
    assert isinstance(rows, np.ndarray) and np.array_equal(rows, np.arange(len(graph.node_id)) * 10)
    with pytest.raises(ConfigError, match=r"gather_nodes expected one row per own node \(300 on rank 0\); got "
                                          r"shape \(299,\). HINT:"):
        gather_nodes(rt, graph, graph.node_id[1:])


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_equal_to_the_whole_graph_on_many_ranks(tmp_path, ranks):
    run_mpi("user_inference.py", ranks, tmp_path, timeout=150)
