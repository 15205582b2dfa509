"""Tier 1: the fused ReLU + dropout (mpignn.models.dropout) is F.dropout(F.relu(x)) in distribution: a
Bernoulli(1-p) keep mask scaled by 1/(1-p) in training, the ReLU alone in evaluation, the matching gradient;
and SampledGNN trains with it without F.dropout's per-element bernoulli draws or a saved mask."""
import math

import numba
import pytest
import torch
import torch.nn.functional as F

from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.exchange import FeatureStore
from mpignn.loader.batches import BatchLoader
from mpignn.models.dropout import keep_threshold, relu_dropout
from mpignn.models.sampled import SampledGNN
from mpignn.sampling import LocalHops, NeighborSampler

# numba kernel (CPU, contiguous fp32/fp64) and the portable torch path (taken here for a non-contiguous view)
LAYOUTS = ["contiguous", "transposed"]


def _input(layout: str, rows: int = 1000, cols: int = 400, dtype=torch.float32) -> torch.Tensor:
    x = torch.randn(rows, cols, dtype=dtype, generator=torch.Generator().manual_seed(1))
    return x.t().contiguous().t() if layout == "transposed" else x


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keeps_one_minus_p_of_the_positive_entries_scaled_by_its_inverse(layout, p):
    x = _input(layout).abs_() + 0.1  # all positive: every zero of the output is a dropped entry
    torch.manual_seed(0)
    out = relu_dropout(x, p, training=True)
    kept = out != 0
    n, q = x.numel(), 1 - p
    assert abs(kept.sum().item() - n * q) < 5 * math.sqrt(n * p * q)  # 5 sigma of Binomial(n, 1-p)
    torch.testing.assert_close(out[kept], x[kept] / q, rtol=1e-6, atol=0)
    assert keep_threshold(p) / 2**32 == pytest.approx(q, abs=2**-32)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_negative_entries_are_zero_and_the_mean_is_kept(layout):
    x = _input(layout)
    torch.manual_seed(0)
    out = relu_dropout(x, 0.5, training=True)
    assert not out[x <= 0].any()
    relu = F.relu(x)
    # E[out] = relu(x): the mean over 400k entries agrees within 5 standard errors
    assert abs((out - relu).mean().item()) < 5 * (out - relu).std().item() / math.sqrt(x.numel())


def test_masks_are_independent_across_entries_and_calls():
    x = torch.ones(1000, 400)
    torch.manual_seed(0)
    a, b = relu_dropout(x, 0.5, True) != 0, relu_dropout(x, 0.5, True) != 0
    n = x.numel()
    both = (a & b).sum().item()  # ~ n/4 when the two calls draw independent masks
    assert abs(both - n / 4) < 5 * math.sqrt(n * 3 / 16)
    # neighbouring entries (one draw each) are not correlated: pairs kept together ~ 1/4 of the pairs
    pairs = (a[:, ::2] & a[:, 1::2]).sum().item()
    assert abs(pairs - n / 8) < 5 * math.sqrt(n / 2 * 3 / 16)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_evaluation_and_zero_rate_are_the_relu(layout):
    x = _input(layout)
    torch.testing.assert_close(relu_dropout(x, 0.5, training=False), F.relu(x), rtol=0, atol=0)
    torch.testing.assert_close(relu_dropout(x, 0.0, training=True), F.relu(x), rtol=0, atol=0)
    y = x.clone()
    assert relu_dropout(y, 0.5, training=False, inplace=True) is y and torch.equal(y, F.relu(x))


def test_torch_seed_fixes_the_mask_whatever_the_thread_count():
    x = _input("contiguous")
    before = numba.get_num_threads()
    outs = []
    try:
        for threads in (1, before):
            numba.set_num_threads(threads)
            torch.manual_seed(7)
            outs.append(relu_dropout(x, 0.5, True))
    finally:
        numba.set_num_threads(before)
    assert torch.equal(outs[0], outs[1])
    torch.manual_seed(8)
    assert not torch.equal(outs[0], relu_dropout(x, 0.5, True))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("inplace", [False, True])
def test_gradient_is_the_kept_scaled_upstream_gradient(layout, inplace):
    a = _input(layout, 300, 50).requires_grad_()
    h = a * 1.0  # a fresh, unsaved tensor: what SampledGNN hands to the in-place path
    h = h if layout == "contiguous" else h.t().contiguous().t()
    torch.manual_seed(0)
    out = relu_dropout(h, 0.3, True, inplace=inplace)
    assert (out is h) == inplace
    g = torch.randn_like(out)
    out.backward(g)
    mask = (out != 0).float()
    torch.testing.assert_close(a.grad, g * mask / 0.7, rtol=1e-6, atol=0)


def test_gradcheck_under_a_fixed_seed():
    x = torch.randn(6, 7, dtype=torch.float64)
    x = (x + x.sign() * 0.1).requires_grad_()  # away from the ReLU's kink

    def fn(t):
        torch.manual_seed(0)  # the same mask on every evaluation
        return relu_dropout(t, 0.4, True)

    assert torch.autograd.gradcheck(fn, (x,))


def test_rate_outside_zero_one_is_refused():
    with pytest.raises(ValueError, match="HINT"):
        relu_dropout(torch.ones(3), 1.0, True)


@pytest.fixture(scope="module")
def batch():
    g = make_synthetic(SyntheticSpec(num_nodes=4000, avg_degree=10, num_features=16))
    sampler = NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [6, 4, 3])
    return next(iter(BatchLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 64, seed=3)))


def _run(model, batch):
    return model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_sampled_gnn_evaluates_as_without_dropout(batch, kind):
    torch.manual_seed(0)
    plain = SampledGNN(kind, 16, 32, 5, num_layers=3)
    dropped = SampledGNN(kind, 16, 32, 5, num_layers=3, dropout=0.5)
    dropped.load_state_dict(plain.state_dict())
    dropped.eval()
    torch.testing.assert_close(_run(dropped, batch), _run(plain, batch), rtol=0, atol=0)
    dropped.train()
    assert not torch.equal(_run(dropped, batch), _run(plain, batch))


def test_sampled_gnn_trains_without_bernoulli_draws_or_saved_masks(batch, monkeypatch):
    """The CPU step's dropout was F.dropout: a bernoulli_ draw per element (66-81% on top of the default CPU
    epoch: docs/training.md) and a saved bool mask per hidden layer. Neither is left."""
    def refuse(*args, **kwargs):
        raise AssertionError("bernoulli draw in the CPU training step")

    monkeypatch.setattr(torch.Tensor, "bernoulli_", refuse)
    monkeypatch.setattr(torch, "bernoulli", refuse)
    monkeypatch.setattr(torch, "native_dropout", refuse, raising=False)
    monkeypatch.setattr(F, "dropout", refuse)
    saved = []
    torch.manual_seed(0)
    model = SampledGNN("sage", 16, 32, 5, num_layers=3, dropout=0.5)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.dtype) or t, lambda t: t):
        out = _run(model, batch)
    out.square().sum().backward()
    assert all(dtype.is_floating_point for dtype in saved if dtype != torch.int64), saved
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_sampled_gnn_gradients_with_dropout_pass_gradcheck(batch):
    torch.manual_seed(0)
    model = SampledGNN("sage", 16, 8, 5, num_layers=3, dropout=0.5).double()
    x = batch.x.double().requires_grad_()

    def fn(t):
        torch.manual_seed(1)
        return model(t, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)

    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-5, fast_mode=True)


def test_warm_up_compiles_what_training_calls(monkeypatch):
    """`warm_up` (one rank per host, `runtime.graph`) passes the kernels the argument types a CPU fp32 step
    passes: the step then compiles nothing, so no other rank writes numba's cache."""
    from mpignn.models import dropout

    calls = []
    for name in ("_forward_kernel", "_backward_kernel"):
        kernel = getattr(dropout, name)
        monkeypatch.setattr(dropout, name, lambda *args, k=kernel, n=name: (
            calls.append((n, tuple(map(numba.typeof, args)))), k(*args))[1])
    dropout.warm_up()
    warmed = set(calls)
    calls.clear()
    x = torch.randn(64, 8, requires_grad=True)
    relu_dropout(x * 1.0, 0.5, training=True).sum().backward()
    assert {n for n, _ in calls} == {"_forward_kernel", "_backward_kernel"} and set(calls) <= warmed
