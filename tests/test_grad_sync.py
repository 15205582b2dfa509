"""Tier 3: DDP's gradient all-reduce really averages (one step equals one process on the same global batch),
also with more ranks than training nodes (ranks without seeds join every step with zeros)."""
import re

import pytest

from _mpirun import WORKERS, run_python

pytestmark = pytest.mark.mpi


CASES = [
    ("partitioned", "mpi", 2, 40),     # every rank has seeds: the all-reduce must average them
    ("partitioned", "torch", 2, 40),   # the same with the torch.distributed feature exchange (gloo)
    ("replicated", "mpi", 2, 1),       # issue 13: "Message truncated" in an Allreduce
    ("replicated", "mpi", 3, 2),       # shares 1, 1, 0: the mean over 2 seeds, not 2/3 of it
    ("partitioned", "mpi", 3, 1),      # issue 13: hung in MPI
    ("partitioned", "mpi", 3, 2),
]


@pytest.fixture(scope="module")
def passed(tmp_path_factory):
    """{ranks: the job's output}: one job per world size runs its cases in order (each case a bootstrap, a
    step and a shutdown), so a rank imports torch once."""
    root = tmp_path_factory.mktemp("grad")
    outputs = {}
    for ranks in sorted({r for _, _, r, _ in CASES}):
        cases = [f"{mode}:{exchange}:{num_train}" for mode, exchange, r, num_train in CASES if r == ranks]
        _, outputs[ranks] = run_python(ranks, [WORKERS / "grad_sync.py", root, *cases], timeout=180)
    return outputs


@pytest.mark.parametrize("mode,exchange,ranks,num_train", CASES)
def test_one_step_gradients_equal_single_process(passed, mode, exchange, ranks, num_train):
    out = passed[ranks]
    ok = set(re.findall(rf"MPIGNN-OK rank=(\d+) case={mode}:{exchange}:{num_train}(?=\s|MPIGNN-OK|$)", out))
    assert len(ok) == ranks, out[-4000:]
