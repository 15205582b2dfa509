"""Which interface MPI and the rendezvous take (Tier 1, no MPI job): the variables that name one for MPI, the
launcher's -iface passed on to UCX and libfabric, the start-up hint, and the rendezvous's connection test with
the other hosts' answers given as data. tests/test_multihost_interfaces.py runs the same across emulated hosts."""
import socket

import pytest

from mpignn import env
from mpignn.errors import LaunchError
from mpignn.launch import rendezvous
from mpignn.mpi import startup


def test_the_interfaces_named_for_mpi_skip_rdma_ports_and_all():
    assert startup.mpi_ifnames({}) == []
    assert startup.mpi_ifnames({"UCX_NET_DEVICES": "all"}) == []
    assert startup.mpi_ifnames({"UCX_NET_DEVICES": "mlx5_0:1, eth0", "FI_TCP_IFACE": "ib0",
                            "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE": "hsn0"}) == [
        ("UCX_NET_DEVICES", "eth0"), ("FI_TCP_IFACE", "ib0"), ("MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE", "hsn0")]
    # MPI's syntax, not NCCL's: no `^` exclusion list nor `=` prefix (taken as written)
    assert startup.mpi_ifnames({"UCX_NET_DEVICES": "^eth0", "FI_TCP_IFACE": "=ib0"}) == [
        ("UCX_NET_DEVICES", "^eth0"), ("FI_TCP_IFACE", "=ib0")]


def test_the_launchers_iface_goes_to_ucx_with_the_rdma_ports_and_to_libfabric(tmp_path):
    (tmp_path / "mlx5_0" / "ports" / "1").mkdir(parents=True)
    (tmp_path / "mlx5_1" / "ports" / "1").mkdir(parents=True)
    iface = {"MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE": "eth0"}
    assert startup.launcher_iface_env({}, str(tmp_path)) == {}
    assert startup.launcher_iface_env(iface, str(tmp_path)) == {"UCX_NET_DEVICES": "eth0,mlx5_0:1,mlx5_1:1",
                                                            "FI_TCP_IFACE": "eth0"}
    assert startup.launcher_iface_env(iface, str(tmp_path / "none")) == {"UCX_NET_DEVICES": "eth0",
                                                                     "FI_TCP_IFACE": "eth0"}
    mine = {**iface, "UCX_NET_DEVICES": "ib0,mlx5_0:1"}  # what the user gave UCX wins
    assert startup.launcher_iface_env(mine, str(tmp_path)) == {"FI_TCP_IFACE": "eth0"}


@pytest.fixture
def two_nets(monkeypatch):
    for var in ("UCX_NET_DEVICES", "FI_TCP_IFACE", "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE", "MASTER_ADDR",
                "MPIGNN_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(env, "ipv4_interfaces", lambda: [env.Interface("lo", "127.0.0.1", 8),
                                                         env.Interface("mgmt0", "10.1.0.1", 24),
                                                         env.Interface("eth0", "10.2.0.1", 24)])
    monkeypatch.setattr(env, "host_address", lambda: "127.0.1.1")
    return monkeypatch


def test_the_start_up_hint_lists_the_interfaces_and_names_the_launchers_address(two_nets):
    two_nets.setenv("PMI_HOSTNAME", "10.2.0.1")
    tried, fix = startup.interfaces_hint()
    assert tried == "UCX_NET_DEVICES and FI_TCP_IFACE are unset, so MPI may take any of mgmt0 10.1.0.1/24, " \
                    "eth0 10.2.0.1/24"
    assert "e.g. eth0 (it holds 10.2.0.1, the address mpiexec started this host by)" in fix
    for words in ("UCX_NET_DEVICES=eth0", "FI_TCP_IFACE=eth0", "mpiexec -iface eth0"):
        assert words in fix
    two_nets.setenv("FI_TCP_IFACE", "mgmt0")
    two_nets.delenv("PMI_HOSTNAME")
    tried, fix = startup.interfaces_hint()
    assert tried.startswith("MPI was told FI_TCP_IFACE=mgmt0; this host has mgmt0") and "IFACE" in fix


class _Local:
    rank = 0

    def gather(self, value, root=0):
        return [value]

    def Free(self):
        pass


class _Comm:
    """One rank's view of `rendezvous_endpoint` across hosts: `gathered` holds what each gather returns on
    rank 0 (scripted), `bcasts` what each bcast returns on the other ranks; what this rank sends is recorded."""

    def __init__(self, rank, gathered=(), bcasts=()):
        self.rank, self.size, self.gathered, self.bcasts, self.sent = rank, 2, list(gathered), list(bcasts), []

    def Split_type(self, kind, key=0):  # each rank leads its host
        return _Local()

    def gather(self, value, root=0):
        self.sent.append(value)
        return self.gathered.pop(0) if self.rank == 0 else None

    def bcast(self, value, root=0):
        return value if self.rank == 0 else self.bcasts.pop(0)


def test_rank_0_takes_the_first_subnet_every_host_connected_to(two_nets):
    opened, real = [], env.listen_socket

    def listen(address, port=0):  # the test's host has neither address: listen on loopback instead
        opened.append(address)
        return real("127.0.0.1")

    two_nets.setattr(env, "listen_socket", listen)
    other = [env.Interface("mgmt0", "10.1.0.2", 24), env.Interface("eth0", "10.2.0.2", 24)]
    comm = _Comm(0, gathered=[[None, other], [None, [False, True]]])
    assert rendezvous.rendezvous_endpoint(comm) == ("10.2.0.1", "eth0")
    assert opened == ["10.1.0.1", "10.2.0.1"]  # both tried, mgmt0 first (listed first)
    two_nets.setenv("UCX_NET_DEVICES", "eth0")  # what MPI was told comes first
    comm = _Comm(0, gathered=[[None, other], [None, [True, True]]])
    assert rendezvous.rendezvous_endpoint(comm) == ("10.2.0.1", "eth0") and opened[2:] == ["10.2.0.1", "10.1.0.1"]
    comm = _Comm(0, gathered=[[None, other], [None, [False, False]]])
    with pytest.raises(LaunchError, match=r"every other host connects to; got none that all 1 reached within 2s "
                                         r"\(hosts that reached each: 10.2.0.1: 0, 10.1.0.1: 0\). HINT: set "
                                         r"MPIGNN_SOCKET_IFNAME"):
        rendezvous.rendezvous_endpoint(comm)


def test_another_hosts_first_rank_reports_which_addresses_it_connected_to(two_nets):
    with socket.socket() as open_, socket.socket() as shut:
        open_.bind(("127.0.0.1", 0))
        open_.listen(4)
        shut.bind(("127.0.0.1", 0))  # bound, not listening: refused
        endpoints = [shut.getsockname(), open_.getsockname()]
        plan = ([("10.1.0.1", "10.1.0.0/24"), ("10.2.0.1", "10.2.0.0/24")], endpoints, "")
        comm = _Comm(1, bcasts=[plan, ("10.2.0.1", "10.2.0.0/24", "")])
        assert rendezvous.rendezvous_endpoint(comm) == ("10.2.0.1", "eth0")
    assert comm.sent[1] == [False, True]
