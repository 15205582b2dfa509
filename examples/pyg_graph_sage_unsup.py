# PyG's examples/graph_sage_unsup.py (MIT, pyg-team/pytorch_geometric), ported to mpignn.runtime on any number of
# ranks:  mpirun -np 2 python examples/pyg_graph_sage_unsup.py Cora [EPOCHS]   (Cora ships in ../shared)
# Against PyG's file, the lines marked "# mpignn" differ: the imports, the runtime, the graph (row-normalised as
# T.NormalizeFeatures), the labels and masks gathered to rank 0 for scikit-learn, the loader's graph, DDP, the
# loss weighed by edge over ranks (`batch.loss_scale`), the embeddings of every rank's nodes (`inference`, exact)
# gathered to rank 0, the scores sent from rank 0. Deleted, for mpignn does them: the `osp`, transforms and
# Planetoid imports, the dataset's path, and moving x and edge_index to the device.
import sys  # mpignn
from types import SimpleNamespace  # mpignn

import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression

from mpignn.runtime import LinkNeighborLoader, bootstrap, gather_nodes, inference, load_local_graph  # mpignn
from torch_geometric.nn import GraphSAGE

rt = bootstrap()  # mpignn
graph = load_local_graph(rt, sys.argv[1] if len(sys.argv) > 1 else 'Cora', feature_norm='row')  # mpignn
data = SimpleNamespace(num_nodes=graph.part.meta.num_nodes, num_node_features=graph.num_features, y=gather_nodes(rt, graph, graph.y), **{f'{s}_mask': gather_nodes(rt, graph, graph.split_mask(s)) for s in ('train', 'val', 'test')})  # mpignn

train_loader = LinkNeighborLoader(
    graph,  # mpignn
    batch_size=256,
    shuffle=True,
    neg_sampling_ratio=1.0,
    num_neighbors=[10, 10],
)

device = rt.device  # mpignn
model = GraphSAGE(data.num_node_features, hidden_channels=64,
                  num_layers=2).to(device)
model = torch.nn.parallel.DistributedDataParallel(model)  # mpignn
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def train():
    model.train()

    total_loss = 0
    for batch in train_loader:
        batch = batch.to(device)
        optimizer.zero_grad()
        h = model(batch.x, batch.edge_index)
        h_src = h[batch.edge_label_index[0]]
        h_dst = h[batch.edge_label_index[1]]
        pred = (h_src * h_dst).sum(dim=-1)
        loss = F.binary_cross_entropy_with_logits(pred, batch.edge_label) * batch.loss_scale  # mpignn
        loss.backward()
        optimizer.step()
        total_loss += float(loss) * pred.size(0)

    return total_loss / data.num_nodes


@torch.no_grad()
def test():
    model.eval()
    out = gather_nodes(rt, graph, inference(model, graph))  # mpignn: every node's embedding, on rank 0
    if rt.rank != 0:  # mpignn: scikit-learn runs on rank 0, which sends the scores
        return rt.comm.bcast(None)  # mpignn

    clf = LogisticRegression()
    clf.fit(out[data.train_mask], data.y[data.train_mask])

    val_acc = clf.score(out[data.val_mask], data.y[data.val_mask])
    test_acc = clf.score(out[data.test_mask], data.y[data.test_mask])

    return rt.comm.bcast((val_acc, test_acc))  # mpignn


for epoch in range(1, int(sys.argv[2]) + 1 if len(sys.argv) > 2 else 51):  # mpignn
    loss = train()
    val_acc, test_acc = test()
    print(f'Epoch: {epoch:03d}, Loss: {loss:.4f}, '
          f'Val: {val_acc:.4f}, Test: {test_acc:.4f}')
