"""`runtime.inference` on N ranks equals each model on the whole graph: PyG's GraphSAGE, GCN, GAT, GIN, a
reddit-style `.convs` module and mpignn's gcn, each node once, rows in dataset ids; `gather_nodes` joins
them on rank 0 and refuses a rank's extra row on every rank. argv: ROOT. The models and
the whole-graph forward are shared with tests/test_user_inference.py."""
import sys

import numpy as np
import torch
from torch_geometric.nn import SAGEConv
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

from mpignn.data import load_dataset
from mpignn.models import SampledGNN, build_model, encode
from mpignn.mpi import run_main, world
from mpignn.runtime import bootstrap, load_local_graph
from mpignn.runtime import gather_nodes, inference
from mpignn.errors import ConfigError

GRAPH = "synthetic:num_nodes=300,avg_degree=6,num_features=6"


class RedditSAGE(torch.nn.Module):
    """PyG's examples/reddit.py model: conv, ReLU, dropout between layers, the last conv plain."""

    def __init__(self, c_in: int, hidden: int, c_out: int) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList([SAGEConv(c_in, hidden), SAGEConv(hidden, c_out)])

    def forward(self, x, edge_index):
        x = torch.nn.functional.dropout(self.convs[0](x, edge_index).relu(), p=0.5, training=self.training)
        return self.convs[1](x, edge_index)


MODELS = {"sage": lambda i, o: GraphSAGE(i, 8, 2, o), "gcn": lambda i, o: GCN(i, 8, 2, o),
          "gat": lambda i, o: GAT(i, 8, 2, o, heads=2), "gin": lambda i, o: GIN(i, 8, 2, o),
          "reddit": lambda i, o: RedditSAGE(i, 8, o), "mpignn-gcn": lambda i, o: build_model("gcn", i, 8, o, 2)}


def whole_forward(model: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> np.ndarray:
    """The model in eval mode on the whole graph (mpignn's: one hop holding every node and edge)."""
    with torch.no_grad():
        if isinstance(model, SampledGNN):
            nodes, edges = [len(x)] + [0] * model.num_layers, [edge_index.shape[1]] + [0] * (model.num_layers - 1)
            return encode(model.eval(), x, edge_index, nodes, edges).numpy()
        return model.eval()(x, edge_index).numpy()


def main(root: str) -> None:
    rt = bootstrap(threads=1)
    graph = load_local_graph(rt, GRAPH, root, fanout=[3, 3], cache_size=0)
    assert np.array_equal(np.sort(np.concatenate(rt.comm.allgather(graph.node_id))), np.arange(300)), "nodes once"
    data = load_dataset(GRAPH)
    x, edge_index = torch.from_numpy(data.x), torch.from_numpy(data.edge_index())
    for name, make in MODELS.items():
        torch.manual_seed(0)
        model = make(graph.num_features, graph.num_classes)
        want = whole_forward(model, x, edge_index)[graph.node_id]
        got = inference(model, graph, batch_size=37, halo_mib=0.001).numpy()
        assert got.shape == want.shape and np.allclose(got, want, atol=1e-5, rtol=1e-4), (name, got.shape, want.shape)
    every = gather_nodes(rt, graph, torch.from_numpy(got))  # rank 0: every node's row, in the dataset's order
    if rt.rank == 0:
        assert isinstance(every, torch.Tensor) and every.shape == (300, got.shape[1]), every.shape
        assert np.allclose(every.numpy(), whole_forward(model, x, edge_index), atol=1e-5, rtol=1e-4)
    else:
        assert every is None
    rows = np.arange(len(graph.node_id) + (rt.rank == rt.world_size - 1))  # the last rank: one row too many
    try:
        gather_nodes(rt, graph, rows)
        raise AssertionError("a rank's extra row was not refused")
    except ConfigError as exc:  # on every rank alike
        assert f"rank {rt.world_size - 1}: gather_nodes expected one row per own node" in str(exc), exc
    print(f"MPIGNN-OK rank={world().rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1]))
