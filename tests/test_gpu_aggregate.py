"""GPU tests (marker `gpu`) of the SAGE aggregation on the device: bf16 against the CPU's fp32, bit-for-bit
repeatable on CUDA (cuSPARSE, no atomics), and no implicit host sync in a model step on CUDA.
Skipped with a reason where torch sees no such device."""
import copy

import pytest
import torch

from _devices import DEVICE, needs_device

pytestmark = pytest.mark.gpu


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")


@pytest.fixture(scope="module")
def batch():
    from mpignn.data import make_synthetic
    from mpignn.data.synthetic import SyntheticSpec
    from mpignn.exchange import FeatureStore
    from mpignn.loader.batches import BatchLoader
    from mpignn.sampling import LocalHops, NeighborSampler

    g = make_synthetic(SyntheticSpec(num_nodes=4000, avg_degree=10, num_features=16))
    sampler = NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [10, 8, 5])
    return next(iter(BatchLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 256, seed=3)))


def _step(model, data):
    from mpignn.models import forward_batch

    out = forward_batch(model, data)
    out.float().square().sum().backward()
    return out, [p.grad.clone() for p in model.parameters()]


@needs_device
def test_bf16_on_the_device_is_close_to_fp32_on_cpu(batch):
    from mpignn.models import build_model

    torch.manual_seed(0)
    cpu_model = build_model("sage", 16, 64, 8, num_layers=3)
    dev_model = copy.deepcopy(cpu_model).to(DEVICE)
    ref, _ = _step(cpu_model, batch)
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        out, grads = _step(dev_model, batch.clone().to(DEVICE))
    assert out.dtype == torch.bfloat16 and all(g.isfinite().all() for g in grads)
    torch.testing.assert_close(out.float().cpu(), ref, rtol=0.05, atol=0.05)


@needs_cuda
def test_cuda_step_is_bit_for_bit_repeatable(batch):
    """cuSPARSE's CSR product (no index_add_ atomics): two identical steps give identical outputs and grads."""
    from mpignn.models import build_model

    torch.manual_seed(0)
    model = build_model("sage", 16, 64, 8, num_layers=3).cuda()
    data = batch.clone().to("cuda")
    runs = []
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        runs.append(_step(model, data))
    torch.testing.assert_close(runs[0][0], runs[1][0], rtol=0, atol=0)
    for a, b in zip(runs[0][1], runs[1][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@needs_cuda
def test_cuda_model_step_makes_no_implicit_host_sync(batch):
    """With the loader's in-degrees, forward and backward queue work only: torch's sync debug mode raises on
    any implicit device->host wait (bincount, .item(), nonzero, a host read)."""
    from mpignn.models import build_model

    model = build_model("sage", 16, 64, 8, num_layers=3).cuda()
    data = batch.clone().to("cuda")
    _step(model, data)  # first call: cuSPARSE handles and workspaces are set up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _step(model, data)
    finally:
        torch.cuda.set_sync_debug_mode("default")
