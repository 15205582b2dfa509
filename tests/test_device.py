"""Tier 1: the device pipeline's decisions and its host-side parts, with the hardware faked where needed."""
import sys
import types

import numpy as np
import pytest
import torch

from mpignn import dist
from mpignn.device import Uploader, accelerator, pinned_empty, synchronize
from mpignn.dist import Choice
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


class _Rt:
    def __init__(self, device, threads):
        self.choice, self.threads = Choice(device, "gloo"), threads


@pytest.mark.parametrize("device,threads,talks,mode,expected", [
    ("cpu", 1, False, "auto", True),    # one part: nothing collective in the producer
    ("cpu", 1, True, "auto", False),    # several parts, no core to spare (measured slower)
    ("cpu", 8, True, "auto", True),
    ("cuda:0", 1, True, "auto", True),  # the host thread mostly waits for the GPU
    ("cpu", 1, True, "on", True),
    ("cpu", 8, False, "off", False),
])
def test_overlap_decision(device, threads, talks, mode, expected):
    from mpignn.runtime import overlap

    assert overlap(_Rt(device, threads), talks, mode) is expected


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
