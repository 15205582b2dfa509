# PyG's examples/multi_gpu/distributed_sampling.py (MIT, pyg-team/pytorch_geometric), ported to mpignn.runtime:
#     mpirun -np 2 python examples/pyg_distributed_sampling.py        (CPU, or a GPU per rank; Cora ships in ../shared)
# Against PyG's file, 15 lines differ, each marked "# mpignn": the import, the loaders take split names (each rank
# its own nodes) and batch size 32 (Cora has 140 training nodes: with drop_last, 1024 gives no batch), devices from
# the runtime (`rt`, set in __main__), the loss weighed by seed over ranks (`batch.loss_scale`), accuracy over all
# ranks weighted by seeds (PyG averaged each rank's batch averages), the launch. Deleted, for mpignn does them: MASTER_ADDR/PORT and init_process_group, moving x/y to the
# device, splitting indices by rank (whose `size // world_size` can make world_size + 1 chunks), averaging the
# ranks' accuracies by hand (13 lines), mp.spawn; unused imports. Its test split is the test set (PyG used val_mask).
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from mpignn.runtime import NeighborLoader, accuracy as acc, bootstrap, load_local_graph  # mpignn
from torch_geometric.nn import SAGEConv


class SAGE(torch.nn.Module):
    def __init__(self, in_channels: int, hidden_channels: int,
                 out_channels: int, num_layers: int = 2):
        super().__init__()

        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=0.5, training=self.training)
        return x


def eval(loader, model, acc, rank):
    pred, y = [], []  # mpignn
    with torch.no_grad():
        for i, batch in enumerate(loader):
            batch_size = batch.batch_size
            out = model.module(batch.x, batch.edge_index.to(rt.device))  # mpignn
            pred.append(out[:batch_size].argmax(dim=-1)), y.append(batch.y[:batch_size])  # mpignn

        return acc(rt, torch.cat(pred), torch.cat(y)) * 100.0  # mpignn


def run(rank, world_size, dataset, start):
    kwargs = dict(batch_size=32, num_workers=4, persistent_workers=True)  # mpignn
    train_loader = NeighborLoader(dataset, input_nodes='train',  # mpignn
                                  num_neighbors=[25, 10], shuffle=True,
                                  drop_last=True, **kwargs)
    val_loader = NeighborLoader(dataset, input_nodes='val',  # mpignn
                                num_neighbors=[25,
                                               10], drop_last=True, **kwargs)
    test_loader = NeighborLoader(dataset, input_nodes='test',  # mpignn
                                 num_neighbors=[25,
                                                10], drop_last=True, **kwargs)

    torch.manual_seed(12345)
    model = SAGE(dataset.num_features, 256, dataset.num_classes).to(rt.device)  # mpignn
    model = DistributedDataParallel(model)  # mpignn
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    start_time = True
    for epoch in range(1, 21):
        model.train()
        for batch in train_loader:
            if start_time:
                start_time = False
                since = time.time()
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index.to(rt.device))[:batch.batch_size]  # mpignn
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            (loss * batch.loss_scale).backward()  # mpignn: every seed weighs alike, however many each rank owns
            optimizer.step()

        dist.barrier()

        if rank == 0:
            print(f'Epoch: {epoch:02d}, Loss: {loss:.4f}')

        if epoch % 5 == 0:
            model.eval()
            acc1 = eval(train_loader, model, acc, rank)
            acc2 = eval(val_loader, model, acc, rank)
            acc3 = eval(test_loader, model, acc, rank)

            if rank == 0:
                print(f'Train: {acc1:.4f}, Val: {acc2:.4f}, Test: {acc3:.4f}')

        dist.barrier()

    dist.destroy_process_group()
    if rank == 0:
        print("Time from first minibatch to done training=",
              round(time.time() - since, 2))
        print("Total program time (e2e_time) = ",
              round(time.time() - start, 2))


if __name__ == '__main__':
    start = time.time()
    graph = load_local_graph(rt := bootstrap(), 'Cora')  # mpignn: any dataset name mpignn reads

    run(rt.rank, rt.world_size, graph, start)  # mpignn
