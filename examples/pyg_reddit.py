# PyG's examples/reddit.py (MIT, pyg-team/pytorch_geometric), ported to mpignn.runtime on any number of ranks:
#     mpirun -np 2 python examples/pyg_reddit.py Cora        (a dataset name mpignn reads; Cora ships in ../shared)
# Against PyG's file, 14 lines differ (marked "# mpignn"): the imports, the runtime, the dataset, the loader, DDP,
# the loss weighed by seed over ranks (`batch.loss_scale`), the metrics over ranks. Deleted, for mpignn does them:
# `copy`/`osp` imports, moving x/y to the device, the hand-built subgraph_loader (7 lines) and SAGE.inference
# (20 lines): runtime.inference walks `model.convs` layer by layer over every rank's nodes, exactly.
import sys  # mpignn

import torch
import torch.nn.functional as F
from tqdm import tqdm

from mpignn.runtime import NeighborLoader, accuracy, bootstrap, inference, load_local_graph, mean  # mpignn
from torch_geometric.nn import SAGEConv

rt = bootstrap()  # mpignn
device = rt.device  # mpignn

graph = load_local_graph(rt, sys.argv[1] if len(sys.argv) > 1 else 'Cora')  # mpignn

kwargs = {'batch_size': 1024, 'num_workers': 6, 'persistent_workers': True}
train_loader = NeighborLoader(graph, input_nodes='train',  # mpignn
                              num_neighbors=[25, 10], shuffle=True, **kwargs)


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=0.5, training=self.training)
        return x


model = SAGE(graph.num_features, 256, graph.num_classes).to(device)  # mpignn
model = torch.nn.parallel.DistributedDataParallel(model)  # mpignn
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def train(epoch):
    model.train()

    pbar = tqdm(total=int(len(train_loader.dataset)))
    pbar.set_description(f'Epoch {epoch:02d}')

    total_loss = total_correct = total_examples = 0
    for batch in train_loader:
        optimizer.zero_grad()
        y = batch.y[:batch.batch_size]
        y_hat = model(batch.x, batch.edge_index.to(device))[:batch.batch_size]
        loss = F.cross_entropy(y_hat, y)
        (loss * batch.loss_scale).backward()  # mpignn: every seed weighs alike, however many each rank owns
        optimizer.step()

        total_loss += float(loss) * batch.batch_size
        total_correct += int((y_hat.argmax(dim=-1) == y).sum())
        total_examples += batch.batch_size
        pbar.update(batch.batch_size)
    pbar.close()

    return mean(rt, total_loss, total_examples), mean(rt, total_correct, total_examples)  # mpignn


@torch.no_grad()
def test():
    model.eval()
    y_hat = inference(model, graph).argmax(dim=-1)  # mpignn
    y = torch.as_tensor(graph.y)  # mpignn

    accs = []
    for mask in map(graph.split_mask, ['train', 'val', 'test']):  # mpignn
        accs.append(accuracy(rt, y_hat[mask], y[mask]))  # mpignn
    return accs


for epoch in range(1, 11):
    loss, acc = train(epoch)
    print(f'Epoch {epoch:02d}, Loss: {loss:.4f}, Approx. Train: {acc:.4f}')
    train_acc, val_acc, test_acc = test()
    print(f'Epoch: {epoch:02d}, Train: {train_acc:.4f}, Val: {val_acc:.4f}, '
          f'Test: {test_acc:.4f}')
