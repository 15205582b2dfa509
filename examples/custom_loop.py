"""Your own model and training loop on mpignn's distributed loader.

    mpirun -np 2 python examples/custom_loop.py --dataset synthetic --epochs 3

Each rank loads only its part of the graph; batches are PyG `Data` objects whose remote neighbours and
features were fetched from their owners. The model is plain PyTorch + a PyG layer; DDP syncs gradients.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

from mpignn.mpi import run_main
from mpignn.runtime import NeighborLoader, bootstrap, load_local_graph, reduce_sums, shutdown


class SkipSAGE(torch.nn.Module):
    """Two SAGE layers plus a skip connection from the raw features (something PyG's zoo does not offer)."""

    def __init__(self, in_dim: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(in_dim, hidden), SAGEConv(hidden, hidden)
        self.skip = torch.nn.Linear(in_dim, hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, batch) -> torch.Tensor:
        h = F.relu(self.conv1(batch.x, batch.edge_index))
        h = self.conv2(h, batch.edge_index) + self.skip(batch.x)
        return self.head(F.relu(h))[:batch.batch_size]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--root", default="data")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args(argv)

    rt = bootstrap()
    graph = load_local_graph(rt, args.dataset, args.root, fanout=[10, 5], cache_size=10_000)
    train = NeighborLoader(graph, [10, 5], input_nodes="train", batch_size=args.batch_size, shuffle=True,
                           batch_scope="global")  # --batch-size is all ranks' together, as the CLI's
    test = NeighborLoader(graph, [10, 5], input_nodes="test", batch_size=2048)
    torch.manual_seed(0)  # the same initial weights in every run (DDP copies rank 0's to the others)
    model = SkipSAGE(graph.num_features, 64, graph.num_classes).to(rt.device)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if rt.world_size > 1 else model
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    for epoch in range(args.epochs):
        train.set_epoch(epoch)
        ddp.train()
        loss_sum = seen = 0.0
        for batch in train:  # the same number of steps on every rank
            opt.zero_grad()
            loss = F.cross_entropy(ddp(batch), batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            loss_sum += float(loss.detach()) * batch.batch_size
            seen += batch.batch_size
        model.eval()
        correct = total = 0.0
        with torch.no_grad():
            for batch in test:
                if batch.batch_size:
                    correct += float((model(batch).argmax(-1) == batch.y[:batch.batch_size]).sum())
                    total += batch.batch_size
        sums = reduce_sums(rt, {"loss": loss_sum, "seen": seen, "correct": correct, "total": total})
        if rt.rank == 0:
            print(f"epoch {epoch}: loss {sums['loss'] / sums['seen']:.4f} "
                  f"test acc {sums['correct'] / sums['total']:.4f}", flush=True)
    shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
