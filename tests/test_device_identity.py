"""Device identities on real hardware (marker `gpu`, skipped without a CUDA/XPU device), and the README's XPU
version matrix against setup.py (runs everywhere)."""
import re

import pytest
import torch

from _devices import DEVICE
from _mpirun import ROOT, run_mpi
from mpignn.launch import process_group as dist


CUDA_COUNT = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE is None, reason="no CUDA or XPU device visible to torch")
def test_each_visible_device_has_its_own_identity():
    hw = dist.detect_hardware()
    ids = dist.visible_devices(DEVICE, hw)
    count = hw.cuda_devices if DEVICE == "cuda" else hw.xpu_devices
    assert len(ids) == count and len({instance for _, instance in ids}) == count, ids
    # every rank of a host seeing all devices: local rank r takes device r, nobody shares
    peers = [ids] * count
    for rank in range(count):
        choice = dist.choose(DEVICE, "auto", hw, rank, count, peers)
        assert choice.device == f"{DEVICE}:{rank}" and choice.shared_by == 1, choice


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.skipif(CUDA_COUNT < 1, reason="needs a CUDA GPU")
def test_two_ranks_on_the_same_gpu_share_it_over_gloo():
    run_mpi("device_identity.py", 2, "same", "gloo", 2, timeout=180)


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.skipif(CUDA_COUNT < 2, reason="needs 2 CUDA GPUs on this host")
def test_one_gpu_per_rank_by_mask_takes_nccl_with_the_whole_budget():
    """What srun --gpus-per-task=1 does: each rank sees one GPU, a different one."""
    run_mpi("device_identity.py", 2, "own", "nccl", 1, timeout=180)


def test_readme_ipex_torch_range_agrees_with_setup():
    """IPEX builds pin one torch minor each; the IPEX row of docs/launchers-and-devices.md must start at setup.py's IPEX floor, which
    must not be below setup.py's torch floor."""
    setup = (ROOT / "setup.py").read_text()
    readme = (ROOT / "docs" / "launchers-and-devices.md").read_text()  # moved there from README.md
    torch_floor = tuple(map(int, re.search(r'"torch>=(\d+)\.(\d+)"', setup).groups()))
    ipex = re.search(r'"intel-extension-for-pytorch>=(\d+)\.(\d+)\.(\d+)"', setup)
    assert ipex, "the xpu extra must pin intel-extension-for-pytorch to the torch range it supports"
    ipex_floor = tuple(map(int, ipex.groups()[:2]))
    assert ipex_floor >= torch_floor, (ipex_floor, torch_floor)
    row = next(line for line in readme.splitlines() if line.startswith("| Intel XPU, IPEX |"))
    low, high = map(lambda v: tuple(map(int, v.split("."))), re.search(r"\| (\d+\.\d+)-(\d+\.\d+) ", row).groups())
    assert low == ipex_floor and low >= torch_floor and high >= low, row
