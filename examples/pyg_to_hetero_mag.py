# PyG's examples/hetero/to_hetero_mag.py (MIT, pyg-team/pytorch_geometric), ported to mpignn.runtime on any number
# of ranks, on IMDB (OGB_MAG is not shipped):  mpirun -np 2 python examples/pyg_to_hetero_mag.py
# (run where data/IMDB/raw holds IMDB's raw files: ../shared/datasets/IMDB). Against PyG's file, the lines marked
# "# mpignn" differ: the imports, the runtime, the graph, the seeds (IMDB labels movies; split names stand for
# the masks), the class count, DDP (a batch may lack an edge type: find_unused_parameters), the labelled type's
# name, the loss weighed by seed over ranks (`loss_scale`), the accuracy over ranks. Deleted, for mpignn does
# them or has no counterpart: the `osp`, transforms, OGB_MAG and HGTLoader imports, the dataset's path and
# transform (IMDB's edges run both ways already), moving x and y to the device, and `--use_hgt_loader`'s branch.
import argparse

import torch
import torch.nn.functional as F
from torch.nn import ReLU
from tqdm import tqdm

from mpignn.runtime import NeighborLoader, bootstrap, load_local_graph, mean  # mpignn
from torch_geometric.nn import Linear, SAGEConv, Sequential, to_hetero

parser = argparse.ArgumentParser()
parser.add_argument('--use_hgt_loader', action='store_true')
args = parser.parse_args()

rt = bootstrap()  # mpignn
device = rt.device  # mpignn

data = load_local_graph(rt, 'IMDB')  # mpignn

train_input_nodes = ('movie', 'train')  # mpignn
val_input_nodes = ('movie', 'val')  # mpignn
kwargs = {'batch_size': 1024, 'num_workers': 6, 'persistent_workers': True}

if not args.use_hgt_loader:
    train_loader = NeighborLoader(data, num_neighbors=[10] * 2, shuffle=True,
                                  input_nodes=train_input_nodes, **kwargs)
    val_loader = NeighborLoader(data, num_neighbors=[10] * 2,
                                input_nodes=val_input_nodes, **kwargs)

model = Sequential('x, edge_index', [
    (SAGEConv((-1, -1), 64), 'x, edge_index -> x'),
    ReLU(inplace=True),
    (SAGEConv((-1, -1), 64), 'x, edge_index -> x'),
    ReLU(inplace=True),
    (Linear(-1, data.num_classes), 'x -> x'),  # mpignn
])
model = to_hetero(model, data.metadata(), aggr='sum').to(device)


@torch.no_grad()
def init_params():
    # Initialize lazy parameters via forwarding a single batch to the model:
    batch = next(iter(train_loader))
    batch = batch.to(device, 'edge_index')
    model(batch.x_dict, batch.edge_index_dict)


def train():
    model.train()

    total_examples = total_loss = 0
    for batch in tqdm(train_loader):
        optimizer.zero_grad()
        batch = batch.to(device, 'edge_index')
        batch_size = batch['movie'].batch_size  # mpignn
        out = model(batch.x_dict, batch.edge_index_dict)['movie'][:batch_size]  # mpignn
        loss = F.cross_entropy(out, batch['movie'].y[:batch_size]) * batch.loss_scale  # mpignn
        loss.backward()
        optimizer.step()

        total_examples += batch_size
        total_loss += float(loss) * batch_size

    return total_loss / total_examples


@torch.no_grad()
def test(loader):
    model.eval()

    total_examples = total_correct = 0
    for batch in tqdm(loader):
        batch = batch.to(device, 'edge_index')
        batch_size = batch['movie'].batch_size  # mpignn
        out = model(batch.x_dict, batch.edge_index_dict)['movie'][:batch_size]  # mpignn
        pred = out.argmax(dim=-1)

        total_examples += batch_size
        total_correct += int((pred == batch['movie'].y[:batch_size]).sum())  # mpignn

    return mean(rt, total_correct, total_examples)  # mpignn: over every rank's seeds


init_params()  # Initialize parameters.
model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)  # mpignn
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

for epoch in range(1, 21):
    loss = train()
    val_acc = test(val_loader)
    print(f'Epoch: {epoch:02d}, Loss: {loss:.4f}, Val: {val_acc:.4f}')
