"""Tier 1: the row-trimmed SampledGNN computes what PyG's convs compute on the whole sampled subgraph."""
import pytest
import torch

from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.exchange import FeatureStore
from mpignn.loader.batches import BatchLoader
from mpignn.models.sampled import SampledGNN
from mpignn.sampling import LocalHops, NeighborSampler


@pytest.fixture(scope="module")
def batch():
    g = make_synthetic(SyntheticSpec(num_nodes=4000, avg_degree=10, num_features=16))
    sampler = NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [6, 4, 3])
    return next(iter(BatchLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 64, seed=3)))


def _untrimmed(model, batch):
    """Every conv over every sampled node and edge, as PyG's models run without trimming."""
    x = batch.x
    for layer, conv in enumerate(model.convs):
        x = conv(x, batch.edge_index)
        if layer < len(model.convs) - 1:
            x = torch.relu(x)
    return x[:batch.batch_size]


def _assert_same_outputs_and_grads(model, out, ref):
    """`out` and `ref` (two forward passes of `model`) agree, and so do the gradients they give its weights."""
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref.square().sum().backward()
    for got, want in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_trimmed_forward_and_gradients_match_pyg(batch, kind):
    torch.manual_seed(0)
    model = SampledGNN(kind, 16, 32, 5, num_layers=3)
    out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    ref = _untrimmed(model, batch)
    assert out.shape == (batch.batch_size, 5)
    _assert_same_outputs_and_grads(model, out, ref)


def test_bf16_autocast_stays_close_to_fp32(batch):
    torch.manual_seed(0)
    model = SampledGNN("sage", 16, 32, 5, num_layers=3)
    args = (batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    ref = model(*args)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(*args)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)


def _args(batch, in_degree):
    return (batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges,
            batch.in_degree if in_degree else None)


@pytest.mark.parametrize("in_degree", [True, False], ids=["sampler-degrees", "no-degrees"])
@pytest.mark.parametrize("kernel", ["cpu_reduce", "cusparse", "scatter"])
def test_every_kernel_matches_pyg(batch, monkeypatch, kernel, in_degree):
    """Each device's kernel (the CUDA one is cuSPARSE's product there; its Python runs here with CPU's plain
    CSR product), fed by the sampler's in-degrees or not, gives PyG's outputs and gradients."""
    from mpignn.models import aggregate

    monkeypatch.setattr(aggregate, "kernel_for", lambda device: kernel)
    torch.manual_seed(0)
    model = SampledGNN("sage", 16, 32, 5, num_layers=3)
    out = model(*_args(batch, in_degree))
    ref = _untrimmed(model, batch)
    _assert_same_outputs_and_grads(model, out, ref)


def test_sampler_degrees_give_the_same_model_outputs_bit_for_bit(batch):
    """On CPU the counts from the sampler and those found from the edges build the same CSR: equal outputs."""
    torch.manual_seed(0)
    model = SampledGNN("sage", 16, 32, 5, num_layers=3)
    torch.testing.assert_close(model(*_args(batch, True)), model(*_args(batch, False)), rtol=0, atol=0)


def test_fused_and_portable_kernels_agree_in_bf16(batch, monkeypatch):
    from mpignn.models import aggregate

    torch.manual_seed(0)
    model = SampledGNN("sage", 16, 32, 5, num_layers=3)
    outs = []
    for kernel in ("cpu_reduce", "cusparse", "scatter"):
        monkeypatch.setattr(aggregate, "kernel_for", lambda device, k=kernel: k)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outs.append(model(*_args(batch, True)).float())
    torch.testing.assert_close(outs[0], outs[1], rtol=0.05, atol=0.05)
    torch.testing.assert_close(outs[0], outs[2], rtol=0.05, atol=0.05)


@pytest.mark.parametrize("kernel", ["cusparse", "scatter"])
def test_device_kernels_accumulate_bf16_in_fp32(monkeypatch, kernel):
    """Under bf16 the device kernels sum in fp32: every sparse product / index_add_ runs on fp32 tensors,
    and the mean of 4096 bf16 neighbours is the exact mean rounded once to bf16."""
    from mpignn.models import aggregate

    monkeypatch.setattr(aggregate, "kernel_for", lambda device: kernel)
    dtypes = []
    sparse_mm, index_add = torch.sparse.mm, torch.Tensor.index_add_
    monkeypatch.setattr(torch.sparse, "mm", lambda a, b, *r: dtypes.append(b.dtype) or sparse_mm(a, b, *r))
    monkeypatch.setattr(torch.Tensor, "index_add_", lambda t, *a: dtypes.append(t.dtype) or index_add(t, *a))
    deg, n_src = 4096, 5000
    gen = torch.Generator().manual_seed(0)
    row = torch.randint(0, n_src, (2 * deg,), generator=gen)
    col = torch.arange(2).repeat_interleave(deg)
    x = (1.0 + torch.rand(n_src, 8, generator=gen)).bfloat16()
    adj = aggregate.MeanAdjacency(row, col, 2, n_src, torch.tensor([deg, deg]))
    got = adj.mean(x)
    grad = adj.mean_t(torch.ones(2, 8, dtype=torch.bfloat16))
    assert got.dtype == grad.dtype == torch.bfloat16 and dtypes and set(dtypes) == {torch.float32}
    exact = torch.stack([x[row[:deg]].double().mean(0), x[row[deg:]].double().mean(0)])
    torch.testing.assert_close(got.double(), exact, rtol=2 ** -8, atol=0)
    want = torch.zeros(n_src, dtype=torch.float64).index_add_(0, row, torch.full((2 * deg,), 1.0 / deg,
                                                                                  dtype=torch.float64))
    torch.testing.assert_close(grad[:, 0].double(), want, rtol=2 ** -8, atol=0)


def _gcn_pair():
    from torch_geometric.nn.models import GCN

    torch.manual_seed(0)
    model = SampledGNN("gcn", 16, 32, 5, num_layers=3)
    ref = GCN(16, 32, 3, 5)
    ref.load_state_dict(model.state_dict())  # PyG's GCN's parameter names: checkpoints load either way
    return model, ref


def _grads(model):
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("loops", [False, True])
def test_gcn_matches_pygs_gcn_with_per_hop_trimming(batch, loops, tmp_path):
    """`--model gcn`: PyG's GCN as mpignn trained it before (trim_to_layer: each layer's degrees from its
    trimmed edges), also where the sampled edges hold self-loops and repeats (gcn_norm keeps one loop)."""
    if loops:  # a graph whose every node has a self-loop (twice for even ids) and a repeated edge
        import numpy as np

        g = make_synthetic(SyntheticSpec(num_nodes=500, avg_degree=4, num_features=16))
        rowptr, col = [0], []
        for v in range(g.num_nodes):
            nbrs = list(g.col[g.rowptr[v]:g.rowptr[v + 1]])
            nbrs += [v] * (2 if v % 2 == 0 else 1) + nbrs[:1]
            col += nbrs
            rowptr.append(len(col))
        sampler = NeighborSampler(LocalHops(np.array(rowptr), np.array(col)), g.num_nodes, [-1, 5, 3])
        batch = next(iter(BatchLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 32, seed=1)))
        assert (batch.edge_index[0] == batch.edge_index[1]).any()
    model, ref = _gcn_pair()
    out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges, batch.in_degree)
    want = ref(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
               num_sampled_edges_per_hop=batch.num_sampled_edges)[:batch.batch_size]
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    want.square().sum().backward()
    for got, expected in zip(_grads(model), _grads(ref)):
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-5)
