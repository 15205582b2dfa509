"""mpignn: MPI-native distributed GNN training. See README.md."""
from setuptools import find_packages, setup

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
        "torch>=2.3",
        "torch-geometric>=2.5",
        "mpi4py>=3.1",
        "numpy>=1.24",
        "numba>=0.59",  # the neighbour sampler's kernels (no pyg-lib on PyPI)
        "pymetis>=2023.1",
        "ogb>=1.3.6",
    ],
    extras_require={
        "mpich": ["mpich"],  # an MPI from PyPI for machines without a system MPI
        "test": ["pytest>=7", "mpich"],
        "bench": ["matplotlib"],
        # Intel GPUs (Data Center GPU Max): install the IPEX/oneCCL builds matching your torch from Intel's index.
        "xpu": ["intel-extension-for-pytorch", "oneccl-bindings-for-pytorch"],
    },
    entry_points={"console_scripts": ["mpignn-train=mpignn.train:cli", "mpignn-partition=mpignn.partition.cli:cli"]},
)
