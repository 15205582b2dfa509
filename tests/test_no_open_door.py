"""Issue #25 item 4, no open door: the rendezvous store goes over MPI (no TCP port at all); a hand-set
MASTER_PORT gets a TCPStore on MASTER_ADDR alone, handed its socket with no close/bind race; gloo binds the
chosen interface's address. Nothing torch.distributed opens listens on all interfaces."""
import os
import socket
import sys

import pytest

from _mpirun import SHARED, WORKERS, multihost_env, ok_ranks, run_cmd, run_mpi
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


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["mpi", "port"])
def test_no_listener_on_all_interfaces_and_other_addresses_refuse(mode):
    out = run_mpi("no_open_door.py", 2, mode, timeout=90)
    if mode == "mpi":  # gloo's own listener only, one per rank: the store opened none
        assert out.count("listeners=[('") == 2 and "), (" not in out, out[-2000:]


@pytest.mark.mpi
def test_hand_set_master_port_taken_fails_on_every_rank_with_the_fix():
    out = run_mpi("no_open_door.py", 2, "badport", timeout=90)
    assert out.count("refused") == 2, out[-2000:]


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 3])
def test_mpi_store_semantics_across_ranks(n):
    run_mpi("mpi_store.py", n, timeout=90)


@pytest.mark.mpi
@pytest.mark.skipif(not TOOL.is_file(), reason="../shared/tools/multihost-mpirun is absent")
@pytest.mark.skipif(os.geteuid() != 0, reason="multihost-mpirun needs root (network namespaces)")
@pytest.mark.parametrize("mode", ["mpi", "port"])
def test_no_open_door_across_hosts(mode):
    run_env = multihost_env()
    rc, out = run_cmd([str(TOOL), "-H", "2", "-p", "2", "-t", "150", "--", sys.executable,
                       str(WORKERS / "no_open_door.py"), mode], timeout=180, env=run_env)
    if rc == 2 and "multihost-mpirun:" in out:
        pytest.skip(f"multihost-mpirun could not set up hosts here: {out[-300:]}")
    assert rc == 0 and len(ok_ranks(out)) == 4, out[-3000:]
