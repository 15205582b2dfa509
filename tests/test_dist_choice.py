"""Tier 1: device and backend selection with the hardware faked."""
import pytest

from mpignn.dist import Choice, Hardware, choose
from mpignn.errors import LaunchError

CPU = Hardware()
CUDA4 = Hardware(cuda_devices=4, has_nccl=True)
XPU_NATIVE = Hardware(xpu_devices=2, has_xccl=True)
XPU_IPEX = Hardware(xpu_devices=2, has_ccl=True, has_ipex=True)


@pytest.mark.parametrize("hw,local_rank,expected", [
    (CPU, 0, Choice("cpu", "gloo")),
    (CUDA4, 5, Choice("cuda:1", "nccl")),
    (XPU_NATIVE, 3, Choice("xpu:1", "xccl")),
    (XPU_IPEX, 0, Choice("xpu:0", "ccl")),
])
def test_auto(hw, local_rank, expected):
    assert choose("auto", "auto", hw, local_rank) == expected


def test_explicit_cpu_on_gpu_machine():
    assert choose("cpu", "auto", CUDA4, 0) == Choice("cpu", "gloo")


def test_ccl_on_cpu_when_installed():
    assert choose("cpu", "ccl", Hardware(has_ccl=True), 0) == Choice("cpu", "ccl")


@pytest.mark.parametrize("device,backend,hw,needle", [
    ("cuda", "auto", CPU, "no CUDA device"),
    ("xpu", "auto", CPU, "sees no XPU"),
    ("auto", "nccl", CPU, "nccl is not available"),
    ("cpu", "mpi", CPU, "mpi is not available"),
    ("xpu", "auto", Hardware(xpu_devices=1), "no collective backend for XPU"),
    ("tpu", "auto", CPU, "--device must be one of"),
    ("auto", "nvlink", CPU, "--backend must be one of"),
    ("cpu", "nccl", CUDA4, "needs --device cuda"),
])
def test_refusals_say_what_and_how(device, backend, hw, needle):
    with pytest.raises(LaunchError, match=needle) as info:
        choose(device, backend, hw, 0)
    assert "HINT:" in str(info.value)


def test_ranks_sharing_a_gpu_fall_back_to_gloo():
    one_gpu = Hardware(cuda_devices=1, has_nccl=True)
    assert choose("auto", "auto", one_gpu, 1, local_size=2) == Choice("cuda:0", "gloo")
    assert choose("auto", "auto", CUDA4, 3, local_size=4) == Choice("cuda:3", "nccl")
    with pytest.raises(LaunchError, match="2 ranks share 1 GPU") as info:
        choose("cuda", "nccl", one_gpu, 0, local_size=2)
    assert "HINT:" in str(info.value)
