"""Nodes without features: a learnable embedding per node, held by the node's owner, on any number of ranks.

    mpirun -np 2 python examples/featureless_embedding.py --embed-dim 32    # learned rows
    mpirun -np 2 python examples/featureless_embedding.py --embed-dim 0     # the same model on constant rows

The graph's features are ignored, so only its structure says anything about the labels. With `--embed-dim D`
each rank holds D learnable numbers for each node it owns (`mpignn.exchange.embedding.NodeEmbedding`): a batch
pulls the rows it needs from their owners, and after backward their gradients go back there, where a sparse
optimizer updates only the rows touched. With `--embed-dim 0` every node gets the same input row, so the model
cannot tell nodes apart and scores about chance.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
import torch.nn.functional as F

from mpignn.exchange.embedding import NodeEmbedding
from mpignn.training.ddp import wrap_ddp
from mpignn.models import SampledGNN, encode
from mpignn.mpi import run_main
from mpignn.runtime import NeighborLoader, bootstrap, load_local_graph, reduce_sums, shutdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic:num_nodes=20000,avg_degree=10,num_features=8")
    parser.add_argument("--root", default="data")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--embed-dim", type=int, default=32, help="learnable numbers per node (0: constant rows)")
    parser.add_argument("--embed-lr", type=float, default=0.1, help="the embeddings' sparse Adagrad rate")
    args = parser.parse_args(argv)

    rt = bootstrap()
    graph = load_local_graph(rt, args.dataset, args.root, fanout=[10, 5])
    loaders = {"train": NeighborLoader(graph, [10, 5], input_nodes="train", batch_size=256, shuffle=True,
                                       batch_scope="global"),
               "test": NeighborLoader(graph, [10, 5], input_nodes="test", batch_size=1024)}
    part = graph.part
    dim = max(1, args.embed_dim)
    emb = None
    if args.embed_dim:  # its own communicator: embedding exchanges never interleave with the loader's
        comm = rt.comm.Dup() if rt.world_size > 1 else None
        emb = NodeEmbedding(part.hi - part.lo, dim, lo=part.lo, part_offsets=np.asarray(part.meta.part_offsets),
                            comm=comm, lr=args.embed_lr, seed=0)

    def rows(batch, train: bool) -> torch.Tensor:
        if emb is None:
            return torch.ones(len(batch.n_id), dim, device=rt.device)
        x = emb.pull(batch.part_n_id.cpu().numpy(), rt.device)  # the rows' owners go by partition ids
        return x if train else x.detach()

    torch.manual_seed(0)
    model = SampledGNN("sage", dim, 64, part.meta.num_classes, 2).to(rt.device)
    ddp, _ = wrap_ddp(model, rt.comm, rt.device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        for loader in loaders.values():
            loader.set_epoch(epoch)
        ddp.train()
        for batch in loaders["train"]:  # the same number of steps on every rank
            opt.zero_grad()
            out = encode(ddp, rows(batch, True), batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            opt.step()
            if emb is not None:
                emb.step()  # collective: every rank, every step
        model.eval()
        correct = total = 0.0
        with torch.no_grad():
            for batch in loaders["test"]:  # every rank, every batch: pulls are collective, empty ones too
                x = rows(batch, False)
                if batch.batch_size:
                    out = encode(model, x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
                    correct += float((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
                    total += batch.batch_size
        sums = reduce_sums(rt, {"correct": correct, "total": total,
                                "sent": emb.bytes_sent if emb is not None else 0.0})
        if rt.rank == 0:
            print(f"epoch {epoch}: test acc {sums['correct'] / sums['total']:.4f}, embedding gradients sent "
                  f"{sums['sent'] / 2**20:.2f} MiB so far", flush=True)
    shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
