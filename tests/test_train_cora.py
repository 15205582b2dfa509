"""The sampler's batches train PyG's own GraphSAGE (trim_to_layer path) on Cora to >= 0.75 test accuracy."""
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from _mpirun import SHARED
from mpignn.data import load_dataset
from mpignn.exchange import FeatureStore
from mpignn.loader.batches import BatchLoader
from mpignn.sampling import LocalHops, NeighborSampler

pytestmark = pytest.mark.skipif(not (SHARED / "datasets" / "Cora").is_dir(), reason="../shared/datasets is absent")


def test_pyg_graphsage_on_cora(tmp_path):
    from torch_geometric.nn.models import GraphSAGE

    shutil.copytree(SHARED / "datasets" / "Cora", tmp_path / "Cora")
    g = load_dataset("Cora", str(tmp_path))
    torch.manual_seed(0)
    sampler = NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [10, 10])
    features = FeatureStore(g.x, g.y, 0)
    train = BatchLoader(sampler, features, g.train_idx, 32, seed=0)
    test = BatchLoader(sampler, features, g.test_idx, 256, shuffle=False, wrap=False)
    model = GraphSAGE(g.num_features, 64, 2, g.num_classes, dropout=0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(30):
        model.train()
        train.set_epoch(epoch)
        for batch in train:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            opt.step()
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in test:
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            correct += int((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
    assert total == 1000
    assert correct / total >= 0.75, f"test accuracy {correct / total:.3f}"
    assert isinstance(batch.n_id, torch.Tensor) and np.array_equal(batch.n_id[:batch.batch_size].numpy(),
                                                                   g.test_idx[-batch.batch_size:])
