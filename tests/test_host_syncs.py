"""Tier 1: no device->host transfer per training step (issue #30 item 5), counted on CPU with a fake device.

A "host read" is any Python-level call that would copy a device tensor to the host and wait for it:
`.item()`, `.tolist()`, `.cpu()`, `.numpy()`, `float()`, `int()`, `bool()`. The loop runs with
`device="cuda"` on CPU tensors, its device layer (`accelerator`: timing events) replaced by a logging fake, so
the code path taken is the accelerator's while every read and every wait is visible here.
"""
import time

import numpy as np
import pytest
import torch

import mpignn.launch.device as device_layer

from mpignn.config.train_config import TrainConfig
from mpignn.training import epoch as loop
from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.exchange import FeatureStore
from mpignn.loader.batches import BatchLoader
from mpignn.models import forward_batch
from mpignn.tasks.node import NodeTask, evaluate_nodes
from mpignn.models.sampled import SampledGNN
from mpignn.sampling import LocalHops, NeighborSampler
from mpignn.sampling.device_hops import DeviceHops
from mpignn.sampling.device_sampler import DeviceSampler

READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


@pytest.fixture(scope="module")
def batches():
    g = make_synthetic(SyntheticSpec(num_nodes=3000, avg_degree=8, num_features=16))
    sampler = NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [5, 4, 3])
    return list(BatchLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 32, seed=1))


@pytest.fixture
def host_reads(monkeypatch):
    """A list that gets one entry per host read of a tensor while the test runs."""
    seen = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def spy(self, *args, _name=name, _original=original, **kwargs):
            seen.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)
    return seen


class _Event:
    """A device timing event: its time is the host clock's when recorded; reading it is logged."""

    def __init__(self, log, enable_timing=False):
        self.log, self.at = log, None

    def record(self, stream=None):
        self.at = time.perf_counter()
        self.log.append("record")

    def synchronize(self):
        self.log.append("sync")

    def elapsed_time(self, end):
        return (end.at - self.at) * 1000.0


class _Accelerator:
    """The fake device layer: events and a current stream, everything logged."""

    def __init__(self):
        self.log = []

    def Event(self, enable_timing=False):  # noqa: N802
        return _Event(self.log, enable_timing)

    def current_stream(self, device=None):
        return None


def _train(batches, steps, host_reads, monkeypatch):
    fake = _Accelerator()
    monkeypatch.setattr(device_layer, "accelerator", lambda device: None if str(device) == "cpu" else fake)
    torch.manual_seed(0)
    model = SampledGNN("sage", 16, 16, 8, num_layers=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # Adam reads its step counter (a host tensor)
    host_reads.clear()
    task = NodeTask.from_config(TrainConfig())  # as training builds it (its counter included)
    sums = loop.train_epoch(model, batches[:steps], optimizer, task=task, device="cuda")
    return sums, list(host_reads), fake.log


def test_train_epoch_reads_the_metrics_once_per_epoch_not_per_step(batches, host_reads, monkeypatch):
    few, reads_few, _ = _train(batches, 2, host_reads, monkeypatch)
    many, reads_many, log = _train(batches, 8, host_reads, monkeypatch)
    # Each step's compute is timed by two events on the stream, read after the last step: no step waits.
    assert many["steps"] == 8 and log.count("record") == 16
    assert log.index("sync") > max(i for i, e in enumerate(log) if e == "record"), log
    assert many["compute_s"] > 0
    assert reads_many == reads_few, f"host reads grow with the steps: {reads_few} -> {reads_many}"
    assert len(reads_many) <= 2, reads_many  # loss_sum and correct, at the end of the epoch
    assert many["seeds"] == sum(b.batch_size for b in batches[:8])
    assert 0 <= many["correct"] <= many["seeds"] and many["loss_sum"] > 0


def test_device_sums_equal_the_cpu_sums(batches, monkeypatch):
    """The accelerator path (sums kept as tensors) and the CPU path (Python floats per step) agree."""
    fake = _Accelerator()
    monkeypatch.setattr(device_layer, "accelerator", lambda device: None if str(device) == "cpu" else fake)
    results = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        model = SampledGNN("sage", 16, 16, 8, num_layers=3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        results.append(loop.train_epoch(model, batches[:6], optimizer, task=NodeTask(), device=device))
    cpu, dev = results
    assert dev["correct"] == cpu["correct"] and dev["seeds"] == cpu["seeds"]
    assert dev["loss_sum"] == pytest.approx(cpu["loss_sum"], rel=1e-6)
    ev = [evaluate_nodes(model, batches[:6], device=d) for d in ("cpu", "cuda")]
    assert ev[0] == ev[1]


def test_evaluate_reads_once_per_pass(batches, host_reads):
    model = SampledGNN("sage", 16, 16, 8, num_layers=3)
    counts = []
    for steps in (2, 8):
        host_reads.clear()
        res = evaluate_nodes(model, batches[:steps], device="cuda")
        counts.append(len(host_reads))
        assert res["seeds"] == sum(b.batch_size for b in batches[:steps])
    assert counts[0] == counts[1] <= 1, counts


@pytest.mark.parametrize("kernel", ["cpu_reduce", "cusparse", "scatter"])
def test_model_step_makes_no_host_read_and_no_bincount(batches, host_reads, monkeypatch, kernel):
    """With the sampler's in-degrees, forward and backward read nothing back and count nothing (bincount
    sizes its output from the data: a host sync on GPUs), on every kernel's path."""
    from mpignn.models import aggregate

    monkeypatch.setattr(aggregate, "kernel_for", lambda device: kernel)

    def no_bincount(*args, **kwargs):
        raise AssertionError("bincount called")

    monkeypatch.setattr(torch, "bincount", no_bincount)
    model = SampledGNN("sage", 16, 16, 8, num_layers=3)
    host_reads.clear()
    for batch in batches[:3]:
        forward_batch(model, batch).square().sum().backward()
    assert host_reads == []


def test_sampler_ships_each_targets_in_degree():
    """`in_degree` covers every node some hop targets, equals the count of its edges, and the edges are
    grouped by target in ascending order (what the model's CSR pointer assumes); heterogeneous rows sum
    their edge types."""
    g = make_synthetic(SyntheticSpec(num_nodes=2000, avg_degree=6, num_features=4))
    sampler = NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [4, 3, 2])
    out = sampler.sample(np.arange(0, 200, 7), seed=5)
    targets = sum(out.num_sampled_nodes[:-1])
    assert out.in_degree.dtype == np.int64 and len(out.in_degree) == targets
    np.testing.assert_array_equal(out.in_degree, np.bincount(out.col, minlength=targets))
    for lo, hi in zip(np.cumsum([0] + out.num_sampled_edges[:-1]), np.cumsum(out.num_sampled_edges)):
        assert np.all(np.diff(out.col[lo:hi]) >= 0)
    # two edge types: each row's in-edges split by type; the degrees still count all of them
    t = 2
    degree = np.diff(g.rowptr)
    type_rowptr = np.empty(g.num_nodes * t + 1, dtype=np.int64)
    type_rowptr[0::t] = g.rowptr
    type_rowptr[1::t] = g.rowptr[:-1] + degree // 2
    hetero = NeighborSampler(LocalHops(g.rowptr, g.col, type_rowptr=type_rowptr, num_etypes=t), g.num_nodes,
                             [[2, 1], [1, 1]])
    out = hetero.sample(np.arange(0, 100, 3), seed=2)
    np.testing.assert_array_equal(out.in_degree, np.bincount(out.col, minlength=sum(out.num_sampled_nodes[:-1])))


def test_batches_built_on_the_device_read_sizes_back_never_an_array(host_reads):
    """The device path forced on CPU (issue 41 item 3): `DeviceSampler` over `DeviceHops`, features in a tensor
    table. Per hop the torch kernels read the draw's size and Floyd's widest row (two scalars); no array comes
    back to the host, and the batches are the host path's."""
    graph = make_synthetic(SyntheticSpec(num_nodes=3000, avg_degree=8, num_features=16))
    x = torch.from_numpy(np.asarray(graph.x, dtype=np.float32))
    hops = 3
    loader = BatchLoader(DeviceSampler(DeviceHops(graph.rowptr, graph.col), graph.num_nodes, [5, 4, 3]),
                         FeatureStore(x, graph.y, 0), graph.train_idx, 32, seed=1)
    host = list(BatchLoader(NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [5, 4, 3]),
                            FeatureStore(graph.x, graph.y, 0), graph.train_idx, 32, seed=1))
    host_reads.clear()
    batches = list(loader)
    seen = list(host_reads)
    assert len(batches) == len(host) > 2
    assert not {"cpu", "numpy", "tolist"} & set(seen), sorted(set(seen))
    assert len(seen) <= 2 * hops * len(batches), (len(seen), len(batches))
    for got, want in zip(batches, host):
        assert torch.equal(got.x, want.x) and torch.equal(got.y, want.y)
        assert torch.equal(got.edge_index, want.edge_index) and torch.equal(got.in_degree, want.in_degree)
        assert torch.equal(got.n_id, want.n_id) and got.batch_size == want.batch_size


def test_batches_built_on_the_device_are_timed_by_events_read_at_the_end(monkeypatch):
    """The loader's stage split: a device-built batch's sample and exchange spans are device events, read when
    the epoch's totals are (no batch waits to be timed); a host batch keeps the host clock."""
    from mpignn.loader.batches import LoaderTimes

    fake = _Accelerator()
    monkeypatch.setattr(device_layer, "accelerator", lambda device: None if str(device) == "cpu" else fake)
    times = LoaderTimes("cuda")
    for on_device in (True, True, False):
        start = times.mark()
        time.sleep(0.01)
        drawn = times.mark()
        time.sleep(0.02)
        times.add(start, drawn, on_device=on_device)
    assert "sync" not in fake.log and fake.log.count("record") == 9  # three marks a batch, none read yet
    assert times.sample_s == pytest.approx(0.03, abs=0.02) and times.exchange_s == pytest.approx(0.06, abs=0.02)
    assert fake.log.count("sync") == 4  # the two device batches' two spans, read once
    cpu = LoaderTimes("cpu")
    start = cpu.mark()
    cpu.add(start, cpu.mark(), on_device=True)  # no events on the CPU: the host clock
    assert cpu.sample_s >= 0 and start[1] is None
