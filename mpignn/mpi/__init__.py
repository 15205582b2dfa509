"""MPI helpers any HPC program can use, one module per job. mpi4py is imported lazily: importing does not
initialise MPI.

Layer 2 (mpi): stdlib, numpy and mpi4py; never torch or any mpignn layer above the leaves.
"""
from __future__ import annotations

from mpignn.env import thread_budget
from mpignn.mpi.collectives import (MAX_COUNT, all_arrived, allreduce_max, allreduce_sum, alltoallv, check_all,
                                    check_same, exchange_counts, segment_starts)
from mpignn.mpi.prep import RootFailedError, root_first, run_once
from mpignn.mpi.run import abort_on_uncaught, print0, run_main
from mpignn.mpi.splits import ceil_split, chunk_bounds, pad_to_steps, steps_per_epoch
from mpignn.mpi.topology import Topology, check_launcher, library_version, topology, whoami, world

__all__ = [
    "Topology", "world", "topology", "whoami", "check_launcher", "chunk_bounds", "ceil_split", "steps_per_epoch",
    "pad_to_steps", "root_first", "run_once", "check_all", "alltoallv", "allreduce_sum", "allreduce_max", "run_main",
    "abort_on_uncaught", "RootFailedError", "print0", "thread_budget", "MAX_COUNT", "exchange_counts", "library_version",
    "segment_starts", "check_same", "all_arrived",
]

# The torch-facing helpers live in mpignn.launch, one layer up. MAX_COUNT here is a copy: to lower the piece
# size (tests do), set mpignn.mpi.collectives.MAX_COUNT, which alltoallv reads.
