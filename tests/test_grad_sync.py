"""Tier 3: DDP's gradient all-reduce really averages (one step equals one process on the same global batch),
also with more ranks than training nodes (ranks without seeds join every step with zeros)."""
import pytest

from _mpirun import run_mpi

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("mode,exchange,ranks,num_train", [
    ("partitioned", "mpi", 2, 40),     # every rank has seeds: the all-reduce must average them
    ("partitioned", "torch", 2, 40),   # the same with the torch.distributed feature exchange (gloo)
    ("replicated", "mpi", 2, 1),       # issue 13: "Message truncated" in an Allreduce
    ("replicated", "mpi", 3, 2),       # shares 1, 1, 0: the mean over 2 seeds, not 2/3 of it
    ("partitioned", "mpi", 3, 1),      # issue 13: hung in MPI
    ("partitioned", "mpi", 3, 2),
])
def test_one_step_gradients_equal_single_process(tmp_path, mode, exchange, ranks, num_train):
    run_mpi("grad_sync.py", ranks, mode, exchange, num_train, tmp_path, timeout=90)
