"""One `--minibatch full` epoch on N ranks equals PyG's full-batch model on the whole graph with the same weights:
the training nodes' logits, the loss (the mean over all of them) and every parameter's gradient (as DDP averages
them), for SAGE (its first layer on dense and on CSR input rows, with a residual projection too, and with layer
norm and a linear head), GAT and GCN
(GCN with the whole graph's degrees); a second pass reuses the kept batch and gives
the same logits. argv: ROOT."""
import sys

import numpy as np
import torch
import torch.nn.functional as F

from mpignn.data import load_dataset
from mpignn.loader import whole
from mpignn.models import build_model, forward_batch, sparse_input
from mpignn.mpi import run_main
from mpignn.runtime import bootstrap, load_local_graph
from mpignn.training.loaders import make_loader

GRAPH = "synthetic:num_nodes=400,avg_degree=5,num_features=6,num_classes=4"
LAYERS = 3


def pyg_full_batch(model: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """PyG's full-batch forward: each conv on every node and edge (plus the residual branch, then the norm),
    ReLU between (no dropout); the linear head after a ReLU on the last conv too."""
    for i, conv in enumerate(model.convs):
        out = conv(x, edge_index) if model.kind == "gcn" else conv((x, x), edge_index)
        if model.residuals is not None:
            out = out + model.residuals[i](x)
        hidden = i < len(model.convs) - 1 or model.head is not None
        if hidden and model.norms is not None:
            out = model.norms[i](out)
        x = out.relu() if hidden else out
    return x if model.head is None else model.head(x)


def grads(model: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()


def main(root: str) -> None:
    rt = bootstrap(threads=1)
    graph = load_local_graph(rt, GRAPH, root, fanout=[3] * LAYERS, cache_size=0)
    data = load_dataset(GRAPH)
    x, edge_index, y = (torch.from_numpy(a) for a in (data.x, data.edge_index(), data.y))
    train = torch.from_numpy(np.asarray(data.train_idx, dtype=np.int64))
    comm, world = rt.comm, rt.world_size
    for kind, density, residual, head in (("sage", 0.0, False, False), ("sage", 1.0, False, False),
                                          ("sage", 1.0, True, False), ("sage", 1.0, True, True),
                                          ("gat", 0.0, False, False), ("gcn", 0.0, False, False)):
        whole.SPARSE_DENSITY = density  # 1.0: SAGE's first layer multiplies the input rows as a CSR
        # with a residual: its weight gradients gathered 16 columns at a time (what CS's rows take)
        sparse_input.GATHER_BLOCK_BYTES = 64 if residual else 4 << 20
        torch.manual_seed(0)
        options = {"residual": residual, "linear_head": head, "norm": "layer" if head else "none"}
        model = build_model(kind, graph.num_features, 16, graph.num_classes, LAYERS, 0.0, **options)
        loader = make_loader(rt, graph, "train", minibatch="full")
        assert len(loader) == 1, len(loader)
        batch = next(iter(loader))
        n = batch.batch_size
        logits = forward_batch(model, batch)
        assert batch.whole.sparse == (density > 0), kind  # decided over all ranks
        total = comm.allreduce(n)
        assert total == len(train), (total, len(train))
        loss = F.cross_entropy(logits, batch.y[:n], reduction="sum") * (world / total)
        loss.backward()
        mean_loss = comm.allreduce(float(loss.detach())) / world
        grad = comm.allreduce(grads(model)) / world  # DDP's average
        ids = graph.node_id[batch.n_id[:n].numpy() - graph.part.lo]  # dataset ids of this rank's seeds
        again = forward_batch(model, next(iter(loader)))  # the kept batch, its halo's input rows not re-sent
        assert torch.equal(again, logits), (kind, (again - logits).abs().max())

        reference = build_model(kind, graph.num_features, 16, graph.num_classes, LAYERS, 0.0, **options)
        reference.load_state_dict(model.state_dict())
        want = pyg_full_batch(reference, x, edge_index)
        ref_loss = F.cross_entropy(want[train], y[train])
        ref_loss.backward()
        diff = (logits.detach() - want.detach()[torch.from_numpy(ids)]).abs().max()
        assert diff < 1e-5, (kind, float(diff))
        assert abs(mean_loss - float(ref_loss.detach())) < 1e-5, (kind, mean_loss, float(ref_loss.detach()))
        gdiff = np.abs(grad - grads(reference)).max()
        assert gdiff < 1e-5, (kind, gdiff)
    print(f"MPIGNN-OK rank={rt.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1]))
