"""A management network beside the fabric (multihost-mpirun -m: each host's mgmt0, listed before eth0, reaches no
other host): MPI that cannot start there ends within a bound with one line per rank that names the interfaces and
the variables that fix it; the launcher's -iface reaches MPI; the rendezvous and gloo take eth0, never mgmt0.
Needs ../shared/tools/multihost-mpirun and root (network namespaces)."""
import os
import re
import sys
import time

import pytest

from _mpirun import WORKERS, multihost_env, ok_ranks, run_cmd
from test_multihost import TOOL, loopback_tool  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not TOOL.is_file(), reason="../shared/tools/multihost-mpirun is absent"),
              pytest.mark.skipif(os.geteuid() != 0, reason="multihost-mpirun needs root (network namespaces)")]

TRAIN = [sys.executable, "-m", "mpignn.train", "--dataset", "synthetic:num_nodes=4000,avg_degree=8,num_features=8",
         "--epochs", "1", "--hidden", "16", "--batch-size", "128", "--fanout", "5,5"]


def _with_mgmt(argv, timeout=90, tool=TOOL, **env):
    """`multihost-mpirun -H 2 -p 1 -m -- ARGV` (ARGV may start with mpiexec options); (exit code, output, s)."""
    full = multihost_env(MPIGNN_LOG_RANKS="all", **env)
    start = time.monotonic()
    rc, out = run_cmd([str(tool), "-H", "2", "-p", "1", "-m", "-t", str(timeout), "--", *argv],
                      timeout=timeout + 30, env=full)
    if rc == 2 and "multihost-mpirun:" in out:
        pytest.skip(f"multihost-mpirun could not set up hosts here: {out[-300:]}")
    return rc, out, time.monotonic() - start


def _error_lines(out, rank):
    return re.findall(rf"mpignn: error: \[rank {rank}\] [^\n]*", out)


def test_mpi_that_cannot_start_ends_with_one_line_per_rank_naming_the_interfaces(tmp_path):
    """MPICH's UCX takes mgmt0 and MPI_Init ends the process ("Destination is unreachable"): each rank says so
    in one line that lists its interfaces and the variables that choose one."""
    rc, out, took = _with_mgmt([*TRAIN, "--root", str(tmp_path)])
    assert rc != 0 and took < 60, (took, out[-3000:])
    for rank in (0, 1):
        lines = _error_lines(out, rank)
        assert len(lines) == 1, out[-3000:]
        for word in ("MPI_Init", "mgmt0", "eth0", "UCX_NET_DEVICES=eth0", "FI_TCP_IFACE=eth0", "-iface eth0"):
            assert word in lines[0], (word, lines[0])


def test_mpi_that_hangs_at_start_ends_within_the_bound_naming_the_interface(tmp_path):
    """libfabric's tcp told to use mgmt0 retries for good inside MPI_Init: the start-up bound
    (--collective-timeout) ends it with one line per rank naming FI_TCP_IFACE=mgmt0 and the fix."""
    rc, out, took = _with_mgmt([*TRAIN, "--root", str(tmp_path), "--collective-timeout", "15"],
                               MPIR_CVAR_CH4_NETMOD="ofi", FI_PROVIDER="tcp", FI_TCP_IFACE="mgmt0")
    assert rc != 0 and took < 60, (took, out[-3000:])
    for rank in (0, 1):
        lines = _error_lines(out, rank)
        assert len(lines) == 1, out[-3000:]
        for word in ("MPI_Init", "15s", "FI_TCP_IFACE=mgmt0", "FI_TCP_IFACE=eth0", "UCX_NET_DEVICES=eth0"):
            assert word in lines[0], (word, lines[0])


def test_the_launchers_iface_reaches_mpi_and_training_runs(tmp_path):
    """`mpiexec -iface eth0` alone does not steer MPICH's UCX (ch4): mpignn passes it on before MPI_Init."""
    rc, out, took = _with_mgmt(["-iface", "eth0", *TRAIN, "--root", str(tmp_path)])
    assert rc == 0 and "final test accuracy" in out and "2 ranks on 2 hosts" in out, out[-3000:]
    for host in ("host1", "host2"):
        assert (f"mpiexec -iface passed on to MPI's transports on {host}: FI_TCP_IFACE=eth0 UCX_NET_DEVICES=eth0"
                in out), out[-3000:]


@pytest.mark.parametrize("how", ["named", "probed"])
def test_rendezvous_and_gloo_take_the_fabric_not_the_management_network(loopback_tool, how):  # noqa: F811
    """Host names resolve to 127.0.1.1 (Debian) and mgmt0 shares a subnet across hosts, listed first: gloo must
    still bind and meet on eth0. named: UCX_NET_DEVICES=eth0 (what MPI was told) ranks eth0 first; probed: MPI
    starts with no interface named (libfabric), so only a connection test tells mgmt0 reaches no other host."""
    env = {"UCX_NET_DEVICES": "eth0"} if how == "named" else {"MPIR_CVAR_CH4_NETMOD": "ofi"}
    rc, out, took = _with_mgmt([sys.executable, str(WORKERS / "loopback_rendezvous.py"), "auto"], timeout=60,
                               tool=loopback_tool, **env)
    assert rc == 0 and len(ok_ranks(out)) == 2, out[-3000:]
    assert took < 45, (took, out[-3000:])
