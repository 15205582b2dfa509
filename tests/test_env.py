"""Tier 1: launcher detection, torch env export and the thread budget, with the environment faked."""
import errno
import os
import signal

import pytest

from mpignn import env


def test_single_process_when_nothing_is_set():
    assert env.detect({}) == env.LaunchInfo(launcher="none")


def test_mpich_hydra():
    info = env.detect({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"})
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.local_size) == ("mpich", 3, 4, 1, 2)


def test_openmpi():
    info = env.detect({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                       "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_NODE_RANK": "1"})
    assert (info.rank, info.world_size, info.local_rank, info.local_size, info.host_rank) == (5, 8, 1, 4, 1)


def test_slurm_and_its_task_list_syntax():
    info = env.detect({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
                       "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "2(x2)"})
    assert (info.launcher, info.rank, info.local_rank, info.local_size, info.host_rank, info.num_hosts) == \
        ("slurm", 3, 1, 2, 1, 2)


def test_mpirun_inside_sbatch_beats_slurm_variables():
    info = env.detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "PMI_RANK": "2", "PMI_SIZE": "4"})
    assert (info.launcher, info.rank, info.world_size) == ("mpich", 2, 4)


def test_torchrun():
    info = env.detect({"TORCHELASTIC_RUN_ID": "x", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                       "LOCAL_WORLD_SIZE": "2"})
    assert (info.launcher, info.rank, info.local_rank) == ("torchrun", 1, 1)


def test_foreign_launcher_size():
    assert env.foreign_launcher_size({"OMPI_COMM_WORLD_SIZE": "4"}) == 4
    assert env.foreign_launcher_size({}) == 1
    assert env.foreign_launcher_size({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "3"}) == 3  # torchrun
    assert env.foreign_launcher_size({"WORLD_SIZE": "3"}) == 1  # torch.distributed's variable alone: not a launch


def test_export_keeps_user_values_unless_told():
    fake = {"MASTER_ADDR": "10.0.0.9"}
    changed = env.export_torch_env({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": 1234, "RANK": 0}, env=fake)
    assert fake == {"MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "1234", "RANK": "0"} and changed == {}
    changed = env.export_torch_env({"MASTER_ADDR": "10.0.0.1"}, env=fake, overwrite=True)
    assert fake["MASTER_ADDR"] == "10.0.0.1" and changed == {"MASTER_ADDR": ("10.0.0.9", "10.0.0.1")}


def test_thread_budget():
    assert env.thread_budget(4, cpus=16, host_cpus=16) == (4, False)
    assert env.thread_budget(3, cpus=2, host_cpus=2) == (1, True)
    assert env.thread_budget(8, cpus=2, host_cpus=64) == (2, False)  # bound by the launcher: the mask is ours


def test_onednn_cache_is_bounded_unless_the_user_set_it(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    env.bound_onednn_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
    env.bound_onednn_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "256"


def test_bootstrap_leaves_the_process_alone_unless_asked(monkeypatch):
    # API users' own loops keep their malloc and oneDNN settings; the CLI (below) opts in.
    from mpignn import runtime
    from mpignn.launch import bootstrap

    tuned = []
    monkeypatch.setattr(bootstrap, "tune_allocator", lambda: tuned.append("malloc"))
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    runtime.bootstrap(logging_setup=False)
    assert tuned == [] and "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in os.environ
    runtime.bootstrap(logging_setup=False, tune_process=True)
    assert tuned == ["malloc"] and os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"


@pytest.mark.parametrize("var, value, needle", [
    ("MPIGNN_LOG_RANKS", "0,x", "MPIGNN_LOG_RANKS='0,x' names no ranks. HINT: all, or rank numbers separated by "
                                "commas (e.g. 0,3); unset it for rank 0 only"),
    ("MPIGNN_LOG_LEVEL", "verbose", "MPIGNN_LOG_LEVEL='verbose' names no log level. HINT: DEBUG, INFO, WARNING, "
                                    "ERROR or CRITICAL (any case); unset it for INFO"),
])
def test_a_bad_log_variable_is_one_line_on_every_rank(monkeypatch, var, value, needle):
    from mpignn.errors import ConfigError
    from mpignn.log import setup_logging

    monkeypatch.setenv(var, value)
    for rank in (0, 1):  # shown or not, each rank refuses it (setup_logging raises before touching the loggers)
        with pytest.raises(ConfigError) as err:
            setup_logging(rank, 2, "h")
        assert str(err.value) == needle


def test_train_cli_opts_in_to_process_tuning(monkeypatch):
    from mpignn import train
    from mpignn.runtime import session

    seen = {}

    def fake_bootstrap(*args, **kwargs):
        seen.update(kwargs)
        raise KeyboardInterrupt  # stop before any work

    monkeypatch.setattr(session, "bootstrap", fake_bootstrap)
    before = signal.getsignal(signal.SIGUSR2)
    with pytest.raises(KeyboardInterrupt):
        train.main(["--epochs", "1"])
    assert seen.get("tune_process") is True
    assert signal.getsignal(signal.SIGUSR2) is before  # a library call leaves no handler behind


def test_socket_ifname_takes_the_first_plain_name_in_order():
    assert env.socket_ifname({}) is None
    assert env.socket_ifname({"NCCL_SOCKET_IFNAME": "=ib0,eth0"}) == ("NCCL_SOCKET_IFNAME", "ib0")
    assert env.socket_ifname({"GLOO_SOCKET_IFNAME": "eth1,eth2", "NCCL_SOCKET_IFNAME": "ib0"}) == \
        ("GLOO_SOCKET_IFNAME", "eth1")
    assert env.socket_ifname({"MPIGNN_SOCKET_IFNAME": "hsn0", "GLOO_SOCKET_IFNAME": "eth1"}) == \
        ("MPIGNN_SOCKET_IFNAME", "hsn0")
    # a list of exclusions names nothing: the next variable decides
    assert env.socket_ifname({"GLOO_SOCKET_IFNAME": "^docker0,lo", "NCCL_SOCKET_IFNAME": "ib0"}) == \
        ("NCCL_SOCKET_IFNAME", "ib0")
    assert env.socket_ifname({"MPIGNN_SOCKET_IFNAME": " , "}) is None
    # NCCL's syntax, not MPI's: an alias interface (eth0:1) is one, and `all` is a name like any other
    assert env.socket_ifname({"GLOO_SOCKET_IFNAME": "eth0:1"}) == ("GLOO_SOCKET_IFNAME", "eth0:1")
    assert env.socket_ifname({"MPIGNN_SOCKET_IFNAME": "all"}) == ("MPIGNN_SOCKET_IFNAME", "all")


def _ifaces(*specs):
    return [env.Interface(name, addr, prefix) for name, addr, prefix in specs]


LO = ("lo", "127.0.0.1", 8)


def test_shared_subnet_is_chosen_and_loopback_never():
    root = _ifaces(LO, ("eth0", "192.168.7.1", 24), ("ib0", "10.10.0.1", 16))
    assert env.pick_shared_address(root, [_ifaces(LO, ("ib0", "10.10.3.9", 16))]).address == "10.10.0.1"
    assert env.pick_shared_address(root, [_ifaces(LO, ("eth0", "192.168.7.2", 24), ("ib0", "10.10.3.9", 16)),
                                          _ifaces(("ib0", "10.10.200.1", 16))]).name == "ib0"  # all 3 hosts
    assert env.pick_shared_address(root, [_ifaces(("eth0", "192.168.7.2", 24), ("ib0", "10.10.3.9", 16)),
                                          _ifaces(("x", "192.168.7.3", 24))]).name == "eth0"  # first shared
    assert env.pick_shared_address(root, [_ifaces(LO, ("eth0", "192.168.8.2", 24))]) is None  # other subnet
    assert env.pick_shared_address(_ifaces(LO), [_ifaces(LO)]) is None  # both "share" 127/8: not routable


def test_this_hosts_interfaces_are_listed():
    found = env.ipv4_interfaces()
    assert any(i.is_loopback for i in found) and all(0 <= i.prefixlen <= 32 for i in found), found


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "0", "0x0", "::", "::ffff:0.0.0.0"])
def test_no_socket_listens_on_every_interface_however_it_is_spelled(wildcard):
    """A hand-set MASTER_ADDR reaches `listen_socket` as given (the TCPStore with MASTER_PORT): it checks what
    was bound, so no spelling of "all interfaces" gets a listener."""
    with pytest.raises(OSError) as err:
        env.listen_socket(wildcard).close()
    assert "every interface of this host" in str(err.value) or err.value.errno in (errno.EAFNOSUPPORT,
                                                                                 errno.EADDRNOTAVAIL), err.value
    env.listen_socket("127.0.0.1").close()  # one address: listens


def test_export_keeps_the_users_gloo_interface():
    fake = {"GLOO_SOCKET_IFNAME": "ib0"}
    env.export_torch_env({"GLOO_SOCKET_IFNAME": "eth0", "RANK": 1}, env=fake)
    assert fake == {"GLOO_SOCKET_IFNAME": "ib0", "RANK": "1"}


@pytest.fixture
def debian_host(monkeypatch):
    """Rank 0's host name resolves to 127.0.1.1; its interfaces are lo, eth0 (10.0.0.1/24), docker0."""
    for var in ("MASTER_ADDR", "MPIGNN_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(env, "host_address", lambda: "127.0.1.1")
    monkeypatch.setattr(env, "ipv4_interfaces",
                        lambda: _ifaces(LO, ("docker0", "172.17.0.1", 16), ("eth0", "10.0.0.1", 24)))
    return monkeypatch


class _HostsComm:
    """What `rendezvous_endpoint` sees on rank 0 when the first rank of each other host reports `others` (its
    interfaces); rank 0 leads its own host."""

    rank = 0

    def __init__(self, others):
        self.others, self.size = others, 1 + len(others)

    def Split_type(self, kind, key=0):
        return self

    def Free(self):
        pass

    def gather(self, value, root=0):
        return [value, *self.others]

    def bcast(self, value, root=0):
        return value


def test_rank0_address_across_hosts_is_routable(debian_host):
    from mpignn.errors import LaunchError
    from mpignn.launch.rendezvous import rendezvous_endpoint

    def endpoint(*others):
        return rendezvous_endpoint(_HostsComm(list(others)))

    other = _ifaces(LO, ("docker0", "172.18.0.1", 16), ("eth0", "10.0.0.2", 24))
    assert endpoint(other) == ("10.0.0.1", "eth0")  # and gloo binds rank 0's interface on that subnet
    assert endpoint() == ("127.0.1.1", None)  # one host: loopback is right
    debian_host.setenv("NCCL_SOCKET_IFNAME", "docker")  # NCCL-style prefix
    assert endpoint(other) == ("172.17.0.1", "docker0")
    debian_host.setenv("MPIGNN_SOCKET_IFNAME", "eth9")
    with pytest.raises(LaunchError, match=r"MPIGNN_SOCKET_IFNAME=eth9 should name.*got interfaces lo 127.0.0.1/8"):
        endpoint(other)
    debian_host.setenv("MPIGNN_SOCKET_IFNAME", "lo")
    with pytest.raises(LaunchError, match="non-loopback"):
        endpoint(other)
    debian_host.delenv("MPIGNN_SOCKET_IFNAME")
    debian_host.delenv("NCCL_SOCKET_IFNAME")
    with pytest.raises(LaunchError, match=r"subnet all 2 hosts share.*resolves to 127.0.1.1.*HINT: set "
                                          r"MPIGNN_SOCKET_IFNAME"):
        endpoint(_ifaces(LO, ("eth0", "10.9.0.2", 24)))
    debian_host.setenv("MASTER_ADDR", "10.0.0.1")  # the user's choice wins, checked or not
    assert endpoint(_ifaces(LO)) == ("10.0.0.1", None)

