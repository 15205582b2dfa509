"""mpignn: MPI-native distributed GNN training. See README.md."""
import os
import shutil

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


class CleanBuildPy(build_py):
    """Empty build/lib/mpignn before copying: setuptools keeps files there from earlier builds, so a module
    since removed from the tree would still ship in the next wheel built in the same checkout."""

    def run(self) -> None:
        target = os.path.abspath(os.path.join(self.build_lib, "mpignn"))
        if not getattr(self, "editable_mode", False) and target != os.path.abspath("mpignn"):
            shutil.rmtree(target, ignore_errors=True)
        super().run()


setup(
    name="mpignn",
    version="0.1.0",
    description="MPI-native distributed graph neural network training for HPC clusters",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["mpignn", "mpignn.*"]),
    install_requires=[
        # torch first in the README's install line, so a CPU machine never pulls a CUDA build here.
        # 2.4 is the oldest torch with the device-type autocast API the fused SAGE backward calls,
        # torch.get_autocast_dtype(device_type) and torch.is_autocast_enabled(device_type) (pytorch PR #124479;
        # NVIDIA TransformerEngine PR #1277 gates the same calls on "Starting from PyTorch 2.4"). The rest is
        # older: init_process_group(device_id=...) 2.3, torch.sparse.mm(csr, x, "sum") 2.0,
        # sparse_csr_tensor(check_invariants=) 2.0, torch.load(weights_only=True) 1.13; torch.xpu and
        # dist.is_xccl_available are probed with hasattr/getattr.
        "torch>=2.4",
        "torch-geometric>=2.5",
        "mpi4py>=3.1",
        "numpy>=1.24",
        "tomli>=1.1; python_version < '3.11'",  # --config TOML files: tomllib is in the stdlib from 3.11
        "numba>=0.59",  # the neighbour sampler's kernels (no pyg-lib on PyPI)
        # 2025.2.1: zero_copy_dtype (METIS's idx_t), and the METIS symbols its module exports (from 2025.1.1),
        # which partition.assign calls through ctypes; 2023.1.1 exports none.
        "pymetis>=2025.2.1",
        # --method kaminpar (auto's choice: faster than METIS and leaner in memory on the 2M-node graph,
        # docs/benchmarks.md) wherever PyPI has a wheel for it, so it never needs a compiler; elsewhere auto falls
        # back to METIS and pip install mpignn[kaminpar] states the wish explicitly.
        "kaminpar>=3.7.3; python_version < '3.14' and ((sys_platform == 'linux' and (platform_machine == 'x86_64' "
        "or platform_machine == 'aarch64')) or (sys_platform == 'darwin' and platform_machine == 'arm64'))",
        "ogb>=1.3.6",
    ],
    extras_require={
        "mpich": ["mpich"],  # an MPI from PyPI for machines without a system MPI
        "test": ["pytest>=7", "pytest-xdist>=3", "mpich", "tensorboard>=2.10", "torchmetrics>=1.0"],  # tensorboard: so CI
        # exercises --tensorboard; torchmetrics: the papers100m_gcn port keeps its Accuracy
        "bench": ["matplotlib"],
        # --tensorboard DIR: rank 0 writes the epoch records' scalars (mpignn.training.tensorboard); torch not needed
        "tensorboard": ["tensorboard>=2.10"],
        # The faster partitioner (--method kaminpar, what --method auto picks when importable): wheels with no
        # dependencies for CPython 3.10-3.13 on Linux x86_64/aarch64 and macOS arm64 (kaminpar 3.7.3); none
        # for Intel macOS, Windows or ppc64le, where its sdist needs a C++20 compiler, CMake >= 3.21, TBB and
        # network access (its CMakeLists clones KaMinPar's main branch).
        "kaminpar": ["kaminpar>=3.7.3"],
        # Intel GPUs (Data Center GPU Max) on torch 2.5-2.8 XPU builds: IPEX and the oneCCL bindings each pin one
        # torch minor (2.5.10+xpu: torch 2.5.1 ... 2.8.10+xpu: 2.8); Intel made no XPU build for torch 2.4, so
        # with mpignn's torch>=2.4 the first is 2.5.10. Install them from Intel's index (pip install -e .[xpu]
        # --extra-index-url https://pytorch-extension.intel.com/release-whl/stable/xpu/us/). torch >= 2.8 needs
        # neither (native xccl). tests/test_device.py checks the README's version matrix against these floors.
        "xpu": ["intel-extension-for-pytorch>=2.5.10", "oneccl-bindings-for-pytorch>=2.5.0"],
    },
    cmdclass={"build_py": CleanBuildPy},
    entry_points={"console_scripts": ["mpignn-train=mpignn.train:cli", "mpignn-partition=mpignn.partition.cli:cli"]},
)
