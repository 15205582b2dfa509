"""Tier 1: the device pipeline's decisions and its host-side parts, with the hardware faked where needed."""
import os
import sys
import types

import numpy as np
import pytest
import torch

from mpignn.launch import process_group as dist
from mpignn.launch.device import Uploader, accelerator, pinned_empty, synchronize
from mpignn.launch.process_group import Choice
from mpignn.exchange import FeatureStore


def test_xpu_found_through_ipex_when_torch_alone_has_none(monkeypatch, tmp_path):
    """Stacks before torch 2.4 get torch.xpu from IPEX's import: detection must import IPEX first."""
    monkeypatch.delattr(torch, "xpu", raising=False)
    fake = tmp_path / "intel_extension_for_pytorch"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import types, torch\n"
        "torch.xpu = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "intel_extension_for_pytorch", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    hw = dist.detect_hardware()
    assert hw.xpu_devices == 2 and hw.has_ipex


def test_native_xpu_needs_no_ipex(monkeypatch):
    monkeypatch.setattr(torch, "xpu", types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 4),
                        raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    hw = dist.detect_hardware()
    assert hw.xpu_devices == 4


@pytest.mark.parametrize("choice,version,expected", [
    (Choice("cuda:0", "nccl"), "2.3.0", True),
    (Choice("cuda:1", "gloo"), "2.13.0+cu128", False),  # two ranks sharing a GPU over gloo
    (Choice("xpu:0", "xccl"), "2.8.0+xpu", True),
    (Choice("xpu:0", "xccl"), "2.6.0+xpu", False),  # torch refused non-CUDA device_id before 2.7
    (Choice("xpu:0", "ccl"), "2.5.1+cxx11.abi", False),
    (Choice("cpu", "gloo"), "2.13.0", False),
])
def test_device_id_only_where_torch_takes_it(choice, version, expected):
    assert dist.device_id_accepted(choice, version) is expected


class _OtherRanks:
    """A communicator whose other ranks answer `answer` to a logical-and all-reduce."""

    def __init__(self, answer):
        self.answer = answer

    def allreduce(self, value, op):
        return value and self.answer


class _Rt:
    def __init__(self, device, threads, others=True):
        self.choice, self.threads, self.comm = Choice(device, "gloo"), threads, _OtherRanks(others)


@pytest.mark.parametrize("device,threads,talks,mode,expected", [
    ("cpu", 1, False, "auto", True),    # one part: nothing collective in the producer
    ("cpu", 1, True, "auto", False),    # several parts, no core to spare (measured slower)
    ("cpu", 8, True, "auto", True),
    ("cuda:0", 1, True, "auto", True),  # the host thread mostly waits for the GPU
    ("cpu", 1, True, "on", True),
    ("cpu", 8, False, "off", False),
])
def test_overlap_decision(device, threads, talks, mode, expected):
    from mpignn.loader.prefetch import overlap

    assert overlap(_Rt(device, threads), talks, mode) is expected


def test_auto_prefetches_only_where_every_rank_can():
    """A rank with cores to spare does not prefetch beside one without: at a stop it would hold the next
    step's collectives in flight, which no other rank enters."""
    from mpignn.loader.prefetch import overlap

    assert overlap(_Rt("cpu", 8, others=True), True, "auto") is True
    assert overlap(_Rt("cpu", 8, others=False), True, "auto") is False
    assert overlap(_Rt("cpu", 8, others=False), False, "auto") is True  # one part: nothing to agree


def test_host_helpers_are_no_ops_on_cpu():
    assert accelerator("cpu") is None
    synchronize("cpu")
    buf = pinned_empty((3, 2), torch.float32, "cpu")
    assert buf.shape == (3, 2) and not buf.is_pinned()
    data = object()
    up = Uploader("cpu")
    assert up.upload(data) is data and up.adopt(data) is data


def test_tensor_table_gathers_what_the_numpy_table_gathers():
    """`--exchange torch` keeps the table as a tensor; rows, order and labels match the numpy table."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 4)).astype(np.float32)
    y = rng.integers(0, 3, 50)
    n_id = rng.permutation(50)[:20]
    ref_x, ref_y = FeatureStore(x, y, 0).gather(n_id)
    got_x, got_y = FeatureStore(torch.from_numpy(x), y, 0).gather(n_id)
    assert isinstance(got_x, torch.Tensor)
    np.testing.assert_array_equal(got_x.numpy(), ref_x)
    np.testing.assert_array_equal(got_y, ref_y)
    out = np.empty((20, 4), dtype=np.float32)
    FeatureStore(x, y, 0).gather(n_id, out=out)
    np.testing.assert_array_equal(out, ref_x)
    half = torch.from_numpy(x).bfloat16()  # --feature-dtype bf16 with --exchange torch: a bfloat16 tensor table
    got_half, _ = FeatureStore(half, y, 0).gather(n_id)
    assert got_half.dtype == torch.bfloat16 and torch.equal(got_half, half[torch.from_numpy(n_id)])


# --- The device path's stream discipline, checked with a fake device layer (issue #30 items 2, 3, 6, 7) ---

class _FakeStream:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def wait_stream(self, other):
        self.log.append(("wait", self.name, other.name))

    def synchronize(self):
        self.log.append(("stream-sync", self.name))


class _FakeEvent:
    def __init__(self, log, enable_timing=False):
        self.log, self.timing, self.at = log, enable_timing, None

    def record(self, stream=None):
        self.log.append(("record", stream.name if stream is not None else None))
        self.at = len(self.log)

    def synchronize(self):
        self.log.append(("event-sync",))

    def elapsed_time(self, end):
        assert self.timing and end.timing and self.at is not None and end.at is not None
        self.log.append(("elapsed",))
        return 1000.0 * (end.at - self.at)  # ms: one "second" per log line between the two records


class _FakeAccel:
    """torch.cuda / torch.xpu as far as mpignn's device path uses them, recording every call in `log`."""

    def __init__(self):
        import contextlib

        self.log = []
        self.compute = _FakeStream(self.log, "compute")
        self._current = self.compute
        self._contextlib = contextlib

    def Stream(self, device=None):  # noqa: N802 (torch's name)
        return _FakeStream(self.log, "side")

    def current_stream(self, device=None):
        return self._current

    def stream(self, s):
        @self._contextlib.contextmanager
        def ctx():
            before, self._current = self._current, s
            try:
                yield
            finally:
                self._current = before

        return ctx()

    def synchronize(self, device=None):
        self.log.append(("device-sync",))

    def Event(self, enable_timing=False):  # noqa: N802
        return _FakeEvent(self.log, enable_timing)


@pytest.fixture
def fake_accel(monkeypatch):
    import mpignn.launch.device

    fake = _FakeAccel()
    monkeypatch.setattr(mpignn.launch.device, "accelerator", lambda device: fake)
    return fake


def test_side_stream_waits_for_the_compute_stream_before_widening(fake_accel, monkeypatch):
    """Item 3: a device table's rows are written by the compute stream (`index_copy_`); the side stream must
    wait for it before `x.float()` reads them. ("meta" tensors stand for tensors on the device.)"""
    import mpignn.launch.device
    from torch_geometric.data import Data

    widen = mpignn.launch.device._widen

    def logged_widen(data):
        fake_accel.log.append(("widen", fake_accel.current_stream().name))
        return widen(data)

    monkeypatch.setattr(mpignn.launch.device, "_widen", logged_widen)
    up = Uploader("meta")
    data = Data(x=torch.empty(5, 3, dtype=torch.bfloat16, device="meta"), edge_index=torch.zeros(2, 4).long())
    out = up.upload(data)
    assert out.x.dtype == torch.float32
    log = fake_accel.log
    assert ("wait", "side", "compute") in log and ("widen", "side") in log, log
    assert log.index(("wait", "side", "compute")) < log.index(("widen", "side")), log
    assert ("device-sync",) not in log

    # A host batch (features gathered into pinned memory) does not make the copy wait for compute: that
    # wait would serialise the prefetched copy with the step it should overlap.
    fake_accel.log.clear()
    up.upload(Data(x=torch.zeros(5, 3, dtype=torch.bfloat16), edge_index=torch.zeros(2, 4).long()))
    assert not [e for e in fake_accel.log if e[0] == "wait"] and ("widen", "side") in fake_accel.log

    # The consumer orders its stream after the side stream before using the batch.
    fake_accel.log.clear()
    up.adopt(Data(x=torch.zeros(2, 2)))
    assert fake_accel.log == [("wait", "compute", "side")]


def test_stage_border_sync_is_the_current_stream_not_the_device(fake_accel):
    """A device-wide sync would wait for the loader thread's copies too and book them in this stage."""
    synchronize("meta")
    assert fake_accel.log == [("stream-sync", "compute")]


class _Bucket:
    def __init__(self, values, last):
        self.buf, self.last = torch.tensor(values), last

    def buffer(self):
        return self.buf

    def is_last(self):
        return self.last


def test_device_allreduce_hook_is_asynchronous_and_timed_by_events(fake_accel):
    """Item 6: the hook queues an async all-reduce and hands DDP its future (division in `.then`), with no
    device-wide synchronize; device events on the last bucket only, read when `seconds` is, not per bucket."""
    import torch.distributed as tdist

    from mpignn.training.ddp import AllreduceTimer

    owned = not tdist.is_initialized()  # an earlier test's bootstrap() may have made this process's group
    if owned:
        tdist.init_process_group("gloo", store=tdist.HashStore(), rank=0, world_size=1)
    try:
        timer = AllreduceTimer(types.SimpleNamespace(size=2, rank=0), use_mpi=False, device="meta")
        hook = timer.hook()
        first = hook(None, _Bucket([2.0, 4.0], last=False))
        assert fake_accel.log == []  # no events, no syncs for a bucket that is not the step's last
        last = hook(None, _Bucket([6.0], last=True))
        assert isinstance(first, torch._C.Future) and isinstance(last, torch._C.Future)  # as DDP's own hooks
        assert first.wait().tolist() == [1.0, 2.0] and last.wait().tolist() == [3.0]
        log = fake_accel.log
        assert [e for e in log if e[0] == "record"] == [("record", "compute"), ("record", "compute")]
        assert not [e for e in log if e[0] in ("device-sync", "stream-sync", "event-sync", "elapsed")], log
        seconds = timer.seconds  # the spans are read here, at the end of the epoch
        assert ("event-sync",) in fake_accel.log and ("elapsed",) in fake_accel.log
        assert seconds == pytest.approx(1.0) and timer.seconds == pytest.approx(1.0)
    finally:
        if owned:
            tdist.destroy_process_group()


def test_no_prefetch_with_device_exchange():
    """Item 2: a loader thread's NCCL all_to_all beside DDP's all-reduce can hang: auto never picks it, and
    --prefetch on is refused with a hint (an agreed error: every rank has the same configuration)."""
    from mpignn.errors import ConfigError
    from mpignn.loader.prefetch import overlap

    rt = _Rt("cuda:0", 1)
    assert overlap(rt, True, "auto", device_exchange=False) is True
    assert overlap(rt, True, "auto", device_exchange=True) is False
    assert overlap(rt, True, "off", device_exchange=True) is False
    assert overlap(rt, False, "on", device_exchange=True) is True  # one part: nothing collective in the thread
    with pytest.raises(ConfigError, match="HINT: --prefetch auto"):
        overlap(rt, True, "on", device_exchange=True)
    # make_loader's test: rows in a tensor on an accelerator ("meta" stands for one); on CPU the rows go
    # over gloo beside DDP's MPI all-reduce, no device involved, and a thread stays allowed.
    from mpignn.loader.prefetch import rows_on_device as _rows_on_device

    y = np.zeros(4, dtype=np.int64)
    assert _rows_on_device(FeatureStore(torch.empty(4, 2, device="meta"), y, 0))
    assert not _rows_on_device(FeatureStore(torch.zeros(4, 2), y, 0))
    assert not _rows_on_device(FeatureStore(np.zeros((4, 2), np.float32), y, 0))


def test_hetero_batch_is_not_widened_on_the_host(monkeypatch):
    """Item 7: for an accelerator, each type's features are cut into pinned buffers in the table's dtype
    (half the bytes of float32) and widened after the copy, by the Uploader, as homogeneous batches are."""
    import mpignn.loader.hetero
    from mpignn.data.hetero import type_rowptr
    from mpignn.data.synthetic_hetero import make_user_item
    from mpignn.loader.hetero import HeteroLayout
    from mpignn.sampling import LocalHops, NeighborSampler

    g = make_user_item(num_items=300, num_users=80, edges_per_item=5)
    t = g.schema.num_etypes
    hops = LocalHops(g.rowptr, g.col, 0, type_rowptr(g.rowptr, g.edge_type, t), t)
    out = NeighborSampler(hops, g.num_nodes, [[3, 3], [2, 2]]).sample(g.train_idx[:40], 7)
    layout = HeteroLayout(g.schema, g.schema.offsets[:-1], np.arange(len(g.schema.node_types)))
    x = torch.from_numpy(g.x[out.n_id]).bfloat16()
    y = torch.from_numpy(g.y[out.n_id])
    pinned = []

    def fake_pinned(shape, dtype, device):  # plain memory for the CPU batch, recorded for the accelerator's
        buffer = torch.empty(tuple(shape), dtype=dtype)
        if torch.device(device).type == "cuda":
            pinned.append(buffer)
        return buffer

    monkeypatch.setattr(mpignn.loader.hetero, "pinned_empty", fake_pinned)
    args = (x, y, out.n_id, out.row, out.col, out.edge_type, out.num_sampled_nodes, out.num_sampled_edges, 40)
    dev = layout.split(*args, device="cuda:0")
    host = Uploader("cpu").upload(layout.split(*args))
    ptrs = {p.data_ptr() for p in pinned}
    for k, name in enumerate(g.schema.node_types):
        if g.schema.feature_dims[k]:
            assert dev[name].x.dtype == torch.bfloat16 and dev[name].x.data_ptr() in ptrs
            assert host[name].x.dtype == torch.float32
            assert torch.equal(dev[name].x.float(), host[name].x)
    for e in g.schema.edge_types:
        assert dev[e].edge_index.data_ptr() in ptrs and torch.equal(dev[e].edge_index, host[e].edge_index)
    assert torch.equal(Uploader("cpu").upload(dev)[g.schema.target].x, host[g.schema.target].x)


def _fake_module(tmp_path, monkeypatch, name, body=""):
    """A stand-in for an optional package that cannot be installed here; importing it is recorded."""
    (tmp_path / f"{name}.py").write_text("import sys\nsys.modules[__name__].imported = True\n" + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_detection_finds_the_oneccl_bindings_without_importing_them(monkeypatch, tmp_path):
    """With torch's own xccl, a second oneCCL (the bindings') must not be loaded into the process."""
    _fake_module(tmp_path, monkeypatch, "oneccl_bindings_for_pytorch")
    monkeypatch.setattr(torch, "xpu", types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2),
                        raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    hw = dist.detect_hardware()
    assert hw.has_ccl and "oneccl_bindings_for_pytorch" not in sys.modules


@pytest.mark.parametrize("backend,imported", [("xccl", False), ("ccl", True)])
def test_process_group_imports_the_bindings_for_ccl_only_and_writes_oneccls_placement(monkeypatch, tmp_path,
                                                                                         backend, imported):
    from mpi4py import MPI

    _fake_module(tmp_path, monkeypatch, "oneccl_bindings_for_pytorch")
    for var in ("CCL_PROCESS_LAUNCHER", "CCL_LOCAL_RANK", "CCL_LOCAL_SIZE", "CCL_ATL_TRANSPORT", "CCL_KVS_MODE",
                "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    for var in ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GLOO_SOCKET_IFNAME"):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # restored afterwards
    monkeypatch.setattr(torch, "xpu", types.SimpleNamespace(set_device=lambda d: None), raising=False)
    calls = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda *a, **k: calls.append((a, k)))
    monkeypatch.setattr(dist, "MPIStore", lambda comm, timeout: object())
    monkeypatch.setattr(dist, "_mpi_store", None)  # teardown puts None back (the fake store is no real one)
    dist.init_process_group(MPI.COMM_SELF, 0, 1, 3, 4, Choice("xpu:3", backend))
    assert calls and calls[0][0] == (backend,)
    assert ("oneccl_bindings_for_pytorch" in sys.modules) is imported
    assert (os.environ["CCL_PROCESS_LAUNCHER"], os.environ["CCL_LOCAL_RANK"], os.environ["CCL_LOCAL_SIZE"]) == \
        ("none", "3", "4")


@pytest.mark.parametrize("library,user,expected", [
    # oneCCL reads CCL_LOCAL_RANK/SIZE only with CCL_PROCESS_LAUNCHER=none; its MPI transport needs MPICH's ABI
    ("MPICH Version: 4.3.0", {}, {"CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_RANK": "1", "CCL_LOCAL_SIZE": "4",
                                 "CCL_ATL_TRANSPORT": "mpi", "CCL_KVS_MODE": "mpi"}),
    ("Intel(R) MPI Library 2021.14", {}, {"CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_RANK": "1",
                                          "CCL_LOCAL_SIZE": "4", "CCL_ATL_TRANSPORT": "mpi", "CCL_KVS_MODE": "mpi"}),
    ("Open MPI v5.0.3", {}, {"CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_RANK": "1", "CCL_LOCAL_SIZE": "4",
                             "CCL_ATL_TRANSPORT": "ofi"}),
    # what the user set wins; a launcher of their choice makes CCL_LOCAL_* pointless
    ("MPICH", {"CCL_PROCESS_LAUNCHER": "pmix", "CCL_ATL_TRANSPORT": "ofi"}, {}),
    ("MPICH", {"CCL_LOCAL_RANK": "0", "CCL_KVS_MODE": "pmi"},
     {"CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_SIZE": "4", "CCL_ATL_TRANSPORT": "mpi"}),
])
def test_oneccl_environment_under_an_mpi_launcher(library, user, expected):
    from mpignn.env import ccl_env

    env = dict(user)
    assert ccl_env(1, 4, library, env) == expected
    assert env == user  # reads only


class _Props:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_device_identities_from_uuid_and_pci_address_or_from_the_visibility_mask(monkeypatch):
    gpus = [_Props(name="H100", uuid="GPU-a", pci_domain_id=0, pci_bus_id=0x1b, pci_device_id=0),
            _Props(name="H100", uuid="MIG-b", pci_domain_id=0, pci_bus_id=0x1b, pci_device_id=0)]
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: gpus[i])
    ids = dist.visible_devices("auto", dist.Hardware(cuda_devices=2))
    assert ids == (("0000:1b:00", "GPU-a"), ("0000:1b:00", "MIG-b"))
    # an XPU build without a uuid property: ZE_AFFINITY_MASK names each device (per-rank masks differ)
    monkeypatch.setattr(torch, "xpu", types.SimpleNamespace(get_device_properties=lambda i: _Props(name="Max 1550")),
                        raising=False)
    monkeypatch.setenv("ZE_AFFINITY_MASK", "1.0")
    assert dist.visible_devices("xpu", dist.Hardware(xpu_devices=1)) == (("1.0", "1.0"),)
    monkeypatch.delenv("ZE_AFFINITY_MASK")
    assert dist.visible_devices("xpu", dist.Hardware(xpu_devices=1)) == (("Max 1550#0", "Max 1550#0"),)
    assert dist.visible_devices("cpu", dist.Hardware(cuda_devices=2)) == ()


def test_a_device_table_cache_budget_is_divided_by_the_ranks_on_that_device_only(monkeypatch):
    """4 ranks, each on its own GPU: each rank's cache may take the GPU's whole share (not a quarter)."""
    from mpignn import runtime
    from mpignn.exchange import cache_policy
    from mpignn.mpi import Topology

    fake = types.SimpleNamespace(mem_get_info=lambda d: (8 << 30, 80 << 30), device_count=lambda: 1)
    monkeypatch.setattr("mpignn.launch.device.accelerator", lambda d: fake)
    features = types.SimpleNamespace(on_host=False, x=types.SimpleNamespace(device=torch.device("cuda:0")))
    topo = Topology(0, 4, 0, 4, 0, 1, "h")
    for shared_by in (1, 4):
        rt = runtime.Runtime(None, topo, Choice("cuda:0", "nccl", shared_by), 1)
        assert cache_policy.spare_memory(rt, features) == (8 << 30, shared_by)


def test_ipex_keeps_fp32_weights_under_bf16_autocast(monkeypatch, tmp_path):
    """ipex.optimize(dtype=bf16) would make the weights bf16: DDP all-reduces and checkpoints would be bf16."""
    from mpignn.training.ddp import optimize_for_device

    _fake_module(tmp_path, monkeypatch, "intel_extension_for_pytorch",
                 "calls = []\ndef optimize(model, optimizer=None, dtype=None):\n"
                 "    calls.append(dtype)\n    return model.to(dtype), optimizer\n")
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, _ = optimize_for_device(model, opt, "xpu:0", bf16=True)
    assert sys.modules["intel_extension_for_pytorch"].calls == [torch.float32]
    assert model.weight.dtype == torch.float32


@pytest.mark.parametrize("avx512_bf16, amx, device, lacks", [
    (False, False, "cpu", True),  # bf16 autocast is emulated: the run warns
    (True, False, "cpu", False),
    (False, True, "cpu", False),
    (False, False, "cuda:0", False),  # a GPU's bf16 is the accelerator's business
])
def test_bf16_on_a_cpu_without_bf16_units_is_named(monkeypatch, avx512_bf16, amx, device, lacks):
    from mpignn.launch.device import cpu_lacks_bf16_units

    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert cpu_lacks_bf16_units(device) is lacks
    monkeypatch.setattr("platform.machine", lambda: "aarch64")  # the probes ask for x86 features only
    assert cpu_lacks_bf16_units(device) is False
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")  # torch moved its probe: no guess, no warning
    assert cpu_lacks_bf16_units(device) is False


def test_training_in_bf16_on_such_a_cpu_warns_with_the_fix(monkeypatch, tmp_path, capfd):
    from mpignn import train

    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    args = ["--dataset", "synthetic:num_nodes=600,avg_degree=4,num_features=4,num_classes=2", "--epochs", "1",
            "--fanout", "3", "--hidden", "8", "--batch-size", "256", "--threads", "1", "--root", str(tmp_path)]
    for precision, warned in (("bf16", True), ("fp32", False)):
        capfd.readouterr()
        assert train.main([*args, "--precision", precision]) == 0
        text = capfd.readouterr()
        assert ("CPU without bf16 units" in text.out + text.err) is warned
        assert ("HINT: --precision fp32" in text.out + text.err) is warned
