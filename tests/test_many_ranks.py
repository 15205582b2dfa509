"""Tier 3, many ranks across hosts that share nothing but the network, at 4 hosts x 1 rank and 2 hosts x 3 ranks
(6 uneven parts): the equivalence checks (distributed sampling, an independent DDP step and a cooperative step
each equal one process), then the watchdog: the last rank is stopped (SIGSTOP) during training and every other
rank ends, non-zero, within --collective-timeout plus its bound, naming it. One job per layout: 4 or 6 ranks
importing torch cost this 2-core machine about 20 s a job."""
import os
import re
import signal
from pathlib import Path

import pytest

from test_collective_timeout import _rank_pid
from test_link_cut import BOUND, SMALL, TIMEOUT, TRAIN, _cut_when, _left
from test_multihost import pytestmark  # noqa: F401  (the markers: mpi, the tool, root)

from _mpirun import WORKERS


def _ns_pid(pid: int) -> int:
    """The pid the process has in its host's pid namespace (the one its log lines name)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^NSpid:(.*)$", status, re.M).group(1).split()[-1])


@pytest.mark.parametrize("hosts,per_host", [(4, 1), (2, 3)])
def test_many_ranks_equal_one_process_and_a_stopped_rank_is_named(tmp_path, hosts, per_host):
    last = hosts * per_host - 1
    stopped: dict[str, int] = {}

    def stop(launcher: int) -> None:
        pid = _rank_pid(launcher, last, b"many_ranks.py")
        assert pid is not None, f"rank {last}'s process not found under the launcher"
        stopped.update(pid=pid, ns_pid=_ns_pid(pid))
        os.kill(pid, signal.SIGSTOP)

    m = tmp_path / "m"
    argv = [str(WORKERS / "many_ranks.py"), str(tmp_path / "checks"),  # a shared folder
            *TRAIN[2:], *SMALL, "--root", f"{m}/root",
            "--epochs", "40"]
    try:
        rc, out, after = _cut_when(tmp_path, r"epoch +1 \|", argv, hosts=hosts, per_host=per_host, act=stop,
                                   limit=400)
    finally:
        for sig in (signal.SIGCONT, signal.SIGKILL) if "pid" in stopped else ():
            try:
                os.kill(stopped["pid"], sig)
            except ProcessLookupError:
                break
    done = set(re.findall(r"MPIGNN-OK rank=(\d+) all", out))
    assert len(done) == hosts * per_host, out[-4000:]
    assert rc != 0 and 0 <= after < TIMEOUT + BOUND, (rc, after, out[-3000:])
    assert f"rank {last} (pid {stopped['ns_pid']} on host{hosts}) stopped answering" in out, out[-3000:]
    assert "final test accuracy" not in out
    assert not _left(tmp_path), "ranks of the stopped job still run"
