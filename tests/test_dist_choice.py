"""Tier 1: device and backend selection with the hardware faked."""
import pytest

from mpignn.launch.process_group import Choice, Hardware, agree, choose
from mpignn.errors import ConfigError, LaunchError

CPU = Hardware()
CUDA4 = Hardware(cuda_devices=4, has_nccl=True)
XPU_NATIVE = Hardware(xpu_devices=2, has_xccl=True)
XPU_IPEX = Hardware(xpu_devices=2, has_ccl=True, has_ipex=True)


@pytest.mark.parametrize("hw,local_rank,expected", [
    (CPU, 0, Choice("cpu", "gloo")),
    (CUDA4, 5, Choice("cuda:1", "nccl")),
    (XPU_NATIVE, 3, Choice("xpu:1", "xccl")),
    (XPU_IPEX, 0, Choice("xpu:0", "ccl")),
    (Hardware(cuda_devices=2, has_nccl=True, xpu_devices=2, has_xccl=True), 1, Choice("cuda:1", "nccl")),
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
    assert choose("auto", "auto", one_gpu, 1, local_size=2) == Choice("cuda:0", "gloo", shared_by=2)
    assert choose("auto", "auto", CUDA4, 3, local_size=4) == Choice("cuda:3", "nccl")
    with pytest.raises(LaunchError, match="2 ranks on this host use one GPU") as info:
        choose("cuda", "nccl", one_gpu, 0, local_size=2)
    assert "HINT:" in str(info.value)


def test_hosts_that_chose_apart_agree_on_one_process_group_or_refuse_alike():
    """Three ranks on two one-GPU hosts: the two sharing a GPU took gloo, the lone one nccl; under auto all take
    gloo (one process group has one backend). A host without a GPU under --device auto is refused on every rank."""
    mine = Choice("cuda:0", "nccl")
    shared = [("cuda", "gloo", "a"), ("cuda", "gloo", "a"), ("cuda", "nccl", "b")]
    assert agree(mine, shared, "auto") == Choice("cuda:0", "gloo")
    assert agree(mine, [("cuda", "nccl", "a"), ("cuda", "nccl", "b")], "auto") is mine
    with pytest.raises(LaunchError, match="got a: cuda/nccl, b: cpu/gloo. HINT: give every host the same"):
        agree(mine, [("cuda", "nccl", "a"), ("cpu", "gloo", "b")], "auto")
    with pytest.raises(LaunchError, match="a: cuda/gloo, b: cuda/nccl"):  # a backend given is not changed
        agree(mine, shared, "nccl")


# Device identities as `visible_devices` gives them, (physical chip, instance), one tuple per node-local rank.
def _gpu(n):
    return (f"0000:{n:02x}:00", f"GPU-uuid-{n}")


def _mig(chip, n):
    return (f"0000:{chip:02x}:00", f"MIG-uuid-{chip}-{n}")


ONE_GPU = Hardware(cuda_devices=1, has_nccl=True)
TWO_GPUS = Hardware(cuda_devices=2, has_nccl=True)


@pytest.mark.parametrize("rank", range(4))
def test_four_ranks_each_seeing_its_own_gpu_take_nccl_and_the_whole_cache_budget(rank):
    """srun --gpus-per-task=1 / a per-rank CUDA_VISIBLE_DEVICES: each rank sees one GPU, and no two the same."""
    peers = [(_gpu(r),) for r in range(4)]
    assert choose("auto", "auto", ONE_GPU, rank, 4, peers) == Choice("cuda:0", "nccl", shared_by=1)
    assert choose("cuda", "nccl", ONE_GPU, rank, 4, peers).backend == "nccl"


def test_four_ranks_seeing_the_same_gpu_share_it():
    peers = [(_gpu(0),)] * 4
    assert choose("auto", "auto", ONE_GPU, 2, 4, peers) == Choice("cuda:0", "gloo", shared_by=4)
    with pytest.raises(LaunchError, match="4 ranks on this host use one GPU") as info:
        choose("cuda", "nccl", ONE_GPU, 2, 4, peers)
    assert "HINT:" in str(info.value)


@pytest.mark.parametrize("rank", range(2))
def test_two_ranks_seeing_two_gpus_each_pick_by_local_rank(rank):
    peers = [(_gpu(0), _gpu(1))] * 2
    assert choose("auto", "auto", TWO_GPUS, rank, 2, peers) == Choice(f"cuda:{rank}", "nccl", shared_by=1)


def test_three_ranks_on_two_visible_gpus_share_one_of_them():
    peers = [(_gpu(0), _gpu(1))] * 3
    assert choose("auto", "auto", TWO_GPUS, 1, 3, peers) == Choice("cuda:1", "nccl", shared_by=1)
    assert choose("auto", "auto", TWO_GPUS, 2, 3, peers) == Choice("cuda:0", "gloo", shared_by=2)


def test_mig_slices_of_one_gpu_are_one_gpu_for_nccl_but_each_its_own_memory():
    """NCCL keys ranks on the PCI address: MIG slices of one GPU clash there ("Duplicate GPU detected"), while
    each slice has memory of its own, so the cache budget is not divided."""
    peers = [(_mig(0, r),) for r in range(2)]
    assert choose("auto", "auto", ONE_GPU, 1, 2, peers) == Choice("cuda:0", "gloo", shared_by=1)
    with pytest.raises(LaunchError, match="MIG slices"):
        choose("cuda", "nccl", ONE_GPU, 0, 2, peers)
    on_two_chips = [(_mig(0, 0),), (_mig(1, 0),)]
    assert choose("auto", "auto", ONE_GPU, 1, 2, on_two_chips) == Choice("cuda:0", "nccl", shared_by=1)


def test_unknown_identities_fall_back_to_counting():
    assert choose("auto", "auto", ONE_GPU, 1, 2, [(), ()]) == Choice("cuda:0", "gloo", shared_by=2)
    assert choose("auto", "auto", CUDA4, 1, 8, None) == Choice("cuda:1", "gloo", shared_by=2)


@pytest.mark.parametrize("device,backend", [("xpu", "gloo"), ("xpu", "mpi"), ("auto", "gloo")])
def test_xpu_with_gloo_or_mpi_is_a_config_error(device, backend):
    """ProcessGroupGloo takes CPU and CUDA tensors only: DDP's first broadcast of XPU weights would raise."""
    hw = Hardware(xpu_devices=2, has_xccl=True, has_mpi_backend=True)
    with pytest.raises(ConfigError, match=f"got --backend {backend}") as info:
        choose(device, backend, hw, 0)
    assert "HINT:" in str(info.value)


def test_xpu_with_gloo_is_refused_when_the_config_is_built():
    from mpignn.config.train_config import TrainConfig

    with pytest.raises(ConfigError, match="expected --backend xccl, ccl or auto with --device xpu"):
        TrainConfig(device="xpu", backend="gloo")
    assert TrainConfig(device="cpu", backend="gloo").backend == "gloo"
