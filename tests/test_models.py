"""Tier 1: the row-trimmed SampledGNN computes what PyG's convs compute on the whole sampled subgraph."""
import pytest
import torch

from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.exchange import FeatureStore
from mpignn.loader import NodeLoader
from mpignn.models.sampled import SampledGNN
from mpignn.sampling import LocalHops, NeighborSampler


@pytest.fixture(scope="module")
def batch():
    g = make_synthetic(SyntheticSpec(num_nodes=4000, avg_degree=10, num_features=16))
    sampler = NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [6, 4, 3])
    return next(iter(NodeLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 64, seed=3)))


def _untrimmed(model, batch):
    """Every conv over every sampled node and edge, as PyG's models run without trimming."""
    x = batch.x
    for layer, conv in enumerate(model.convs):
        x = conv(x, batch.edge_index)
        if layer < len(model.convs) - 1:
            x = torch.relu(x)
    return x[:batch.batch_size]


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_trimmed_forward_and_gradients_match_pyg(batch, kind):
    torch.manual_seed(0)
    model = SampledGNN(kind, 16, 32, 5, num_layers=3)
    out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    ref = _untrimmed(model, batch)
    assert out.shape == (batch.batch_size, 5)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref.square().sum().backward()
    for got, want in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)


def test_bf16_autocast_stays_close_to_fp32(batch):
    torch.manual_seed(0)
    model = SampledGNN("sage", 16, 32, 5, num_layers=3)
    args = (batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    ref = model(*args)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(*args)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)


def test_portable_kernel_matches_pyg(batch, monkeypatch):
    """The kernel CUDA and XPU take (gather + index_add_) gives PyG's outputs and gradients too."""
    from mpignn.models import aggregate

    monkeypatch.setattr(aggregate, "_has_fused_kernel", lambda device: False)
    test_trimmed_forward_and_gradients_match_pyg(batch, "sage")


def test_fused_and_portable_kernels_agree_in_bf16(batch, monkeypatch):
    from mpignn.models import aggregate

    torch.manual_seed(0)
    model = SampledGNN("sage", 16, 32, 5, num_layers=3)
    args = (batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    outs = []
    for fused in (True, False):
        monkeypatch.setattr(aggregate, "_has_fused_kernel", lambda device, f=fused: f)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outs.append(model(*args).float())
    torch.testing.assert_close(outs[0], outs[1], rtol=0.05, atol=0.05)
