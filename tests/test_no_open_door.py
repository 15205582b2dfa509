"""Issue #25 item 4, no open door: the rendezvous store goes over MPI (no TCP port at all); a hand-set
MASTER_PORT gets a TCPStore on MASTER_ADDR alone, handed its socket with no close/bind race; gloo binds the
chosen interface's address. Nothing torch.distributed opens listens on all interfaces."""
import os
import re
import socket
import sys

import pytest

from _mpirun import SHARED, WORKERS, multihost_env, run_cmd, run_mpi
from mpignn import env

TOOL = SHARED / "tools" / "multihost-mpirun"


def test_listen_socket_binds_exactly_the_address_and_keeps_the_port():
    sock = env.listen_socket("127.0.0.1")
    try:
        address, port = sock.getsockname()
        assert address == "127.0.0.1" and 0 < port < 65536
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # already listening: no bind to come
            pass
        with pytest.raises(OSError):  # still held: nobody else can take it in between
            env.listen_socket("127.0.0.1", port)
    finally:
        sock.close()
    with pytest.raises(OSError):
        env.listen_socket("192.0.2.254")  # TEST-NET address, not this host's


def _modes_ok(out: str, ranks: int) -> None:
    """Each mode ended on every rank: mpi opened gloo's own listener only (one per rank: the store opened none),
    port passed its probes, badport was refused. (Hydra forwards output in chunks: ranks' lines can run together.)"""
    for mode in MODES:
        assert len(set(re.findall(rf"MPIGNN-OK rank=(\d+) mode={mode} ", out))) == ranks, (mode, out[-3000:])
    mpi = re.findall(r"mode=mpi listeners=(\[[^]]*\])", out)
    assert len(mpi) == ranks and all(found.count("(") == 1 for found in mpi), out[-3000:]
    assert out.count("mode=badport refused") == ranks, out[-3000:]


MODES = ("mpi", "port", "badport")


def test_mpi_store_answers_a_wait_without_waiting_again_and_names_every_key_it_timed_out_on():
    """Tier 1, no MPI: rank 0 answers a wait whose keys it found (a key deleted since must not block it again),
    and a timed-out request names its keys as the caller gave them."""
    from types import SimpleNamespace

    from mpignn.launch.mpi_store import MPIStore, _apply

    class Keys:
        def wait(self, *args):
            raise AssertionError("waited twice")

        def check(self, keys):
            return keys == ["a"]

    assert _apply(Keys(), "wait", (["a"],)) is None and _apply(Keys(), "check", (["a"],)) is True
    store = SimpleNamespace(_comm=SimpleNamespace(rank=1))
    for op, args, keys in [("wait", (["k1", "k2"],), "['k1', 'k2']"), ("check", (["k1", "k2"],), "['k1', 'k2']"),
                           ("get", ("k",), "['k']"), ("add", ("k", 1), "['k', 1]")]:
        assert f"expected the key(s) {keys} of the MPI" in str(MPIStore._timeout(store, op, args, 5))


@pytest.mark.mpi
def test_no_listener_on_all_interfaces_other_addresses_refuse_and_a_taken_port_fails_on_every_rank():
    _modes_ok(run_mpi("no_open_door.py", 2, ",".join(MODES), timeout=120), 2)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 3])
def test_mpi_store_semantics_across_ranks(n):
    run_mpi("mpi_store.py", n, timeout=90)


@pytest.mark.mpi
@pytest.mark.skipif(not TOOL.is_file(), reason="../shared/tools/multihost-mpirun is absent")
@pytest.mark.skipif(os.geteuid() != 0, reason="multihost-mpirun needs root (network namespaces)")
def test_no_open_door_across_hosts():
    run_env = multihost_env()
    rc, out = run_cmd([str(TOOL), "-H", "2", "-p", "2", "-t", "150", "--", sys.executable,
                       str(WORKERS / "no_open_door.py"), ",".join(MODES)], timeout=180, env=run_env)
    if rc == 2 and "multihost-mpirun:" in out:
        pytest.skip(f"multihost-mpirun could not set up hosts here: {out[-300:]}")
    assert rc == 0, out[-3000:]
    _modes_ok(out, 4)
