"""Tier 3 across emulated hosts (network namespaces, own host names): node-local rank 0, cross-host exchange,
distributed training over TCP between hosts. Needs ../shared/tools/multihost-mpirun and root."""
import json
import os
import re
import sys

import pytest

from _mpirun import SHARED, WORKERS, multihost_env, ok_ranks, run_cmd, run_python

TOOL = SHARED / "tools" / "multihost-mpirun"
pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not TOOL.is_file(), reason="../shared/tools/multihost-mpirun is absent"),
              pytest.mark.skipif(os.geteuid() != 0, reason="multihost-mpirun needs root (network namespaces)")]


def _multihost(hosts, per_host, argv, timeout=180, tool=TOOL):
    env = multihost_env()
    rc, out = run_cmd([str(tool), "-H", str(hosts), "-p", str(per_host), "-t", str(timeout), "--", *argv],
                      timeout=timeout + 30, env=env)
    if rc == 2 and "multihost-mpirun:" in out:
        pytest.skip(f"multihost-mpirun could not set up hosts here: {out[-300:]}")
    return rc, out


def _pooled(hosts, per_host, argv, timeout=180):
    """`argv` (a worker script and its arguments, or `-m` and a CLI) in a standing job of `hosts` x `per_host`
    ranks (tests/_mpirun.py::run_python): the tests' jobs of one layout import torch once."""
    rc, out = run_python(hosts * per_host, argv, timeout, hosts=hosts)
    if rc == -1 and "multihost-mpirun:" in out:
        pytest.skip(f"multihost-mpirun could not set up hosts here: {out[-300:]}")
    return rc, out


def test_node_local_first_and_cross_host_exchange(tmp_path):
    rc, out = _pooled(2, 2, [WORKERS / "multihost.py", tmp_path, "2", "2"])
    assert rc == 0 and len(ok_ranks(out)) == 4, out[-3000:]


def test_distributed_sampling_across_hosts(tmp_path):
    rc, out = _pooled(2, 1, [WORKERS / "dist_sampling.py", tmp_path / "p", "metis", "100"])
    assert rc == 0 and len(ok_ranks(out)) == 2, out[-3000:]


def test_partition_delivered_to_hosts_without_it(tmp_path):
    """Each host has a folder of its own (node-local disks): rank 0's partition reaches the other host's leader
    for its ranks, checked by sha256; a corrupt file is refused on every rank and the old folder kept."""
    rc, out = _pooled(2, 2, [WORKERS / "deliver.py", tmp_path])
    assert rc == 0 and len(ok_ranks(out)) == 4, out[-3000:]


def test_delivery_refuses_a_folder_mpignn_did_not_write(tmp_path):
    """The other host holds a folder of the user's at the partition path: refused on every rank, its files
    kept; with force it is replaced, and a killed delivery's leftover (dead pid) on that host is removed."""
    rc, out = _pooled(2, 1, [WORKERS / "deliver_refuse.py", tmp_path])
    assert rc == 0 and len(ok_ranks(out)) == 2, out[-3000:]


def test_training_with_a_partition_on_one_host_only(tmp_path):
    """No shared filesystem: each host mounts its own empty --root (a private tmpfs); rank 0 prepares and
    partitions, the other host receives its part over MPI, and training runs."""
    root = tmp_path / "root"
    root.mkdir()
    train = (f"mount -t tmpfs none {root} && exec {sys.executable} -m mpignn.train --root {root} --dataset "
             "synthetic:num_nodes=4000,avg_degree=8,num_features=8 --epochs 1 --hidden 16 --batch-size 128 "
             "--fanout 5,5")
    rc, out = _multihost(2, 1, ["unshare", "--mount", "sh", "-c", train])
    assert rc == 0 and "final test accuracy" in out and "2 ranks on 2 hosts" in out, out[-3000:]
    assert "to rank 1 from rank(s) 0" in out and "its host lacked parts it loads" in out, out[-3000:]
    assert not list(root.iterdir()), "the ranks wrote outside their private --root"


def test_training_across_hosts_with_node_local_prep(tmp_path):
    rc, out = _pooled(2, 2, ["-m", "mpignn.train", "--root", tmp_path, "--local-prep", "--dataset",
                             "synthetic:num_nodes=4000,avg_degree=8,num_features=8", "--epochs", "1", "--hidden", "16",
                             "--batch-size", "128", "--fanout", "5,5"])
    assert rc == 0 and "final test accuracy" in out and "4 ranks on 2 hosts" in out, out[-3000:]


_OWN_HOSTS_LINE = 'echo "127.0.0.1 localhost";'


@pytest.fixture
def loopback_tool(tmp_path):
    """multihost-mpirun whose hosts map their own name to 127.0.1.1 first in /etc/hosts, as Debian does."""
    text = TOOL.read_text()
    if text.count(_OWN_HOSTS_LINE) != 1:
        pytest.skip("multihost-mpirun writes /etc/hosts differently now; cannot add the loopback mapping")
    tool = tmp_path / "multihost-loopback"
    tool.write_text(text.replace(_OWN_HOSTS_LINE, _OWN_HOSTS_LINE + ' echo "127.0.1.1 host$i";'))
    tool.chmod(0o755)
    return tool


def test_rendezvous_across_hosts_never_uses_a_loopback_address_and_a_missing_interface_fails_at_once(
        loopback_tool):
    """One job, three rendezvous in turn (w:loopback_rendezvous): found over MPI, named by MPIGNN_SOCKET_IFNAME,
    and an interface that does not exist, refused on every rank at once."""
    rc, out = _multihost(2, 2, [sys.executable, str(WORKERS / "loopback_rendezvous.py"), "auto,ifname,badifname"],
                         timeout=120, tool=loopback_tool)
    assert rc == 0, out[-3000:]
    for mode in ("auto", "ifname"):
        assert len(set(re.findall(rf"MPIGNN-OK rank=(\d+) mode={mode} addr=", out))) == 4, (mode, out[-3000:])
    assert len(set(re.findall(r"MPIGNN-OK rank=(\d+) mode=badifname refused", out))) == 4, out[-3000:]


@pytest.mark.slow
def test_two_hosts_of_one_rank_train_what_one_host_of_two_ranks_trains(tmp_path):
    """Reproducible by default (docs/reproducibility.md): the same command, seed, ranks and threads give the
    same records (but times and memory), and the same resolved `auto`s, on 1 host x 2 ranks and 2 hosts x 1
    rank: on the default graph (auto: independent) and on Amazon Photo (auto: full-graph training)."""
    from test_reproducible import graphs, same_run

    from _mpirun import records, train_runs

    argvs = {name: [str(a) for a in common] + ["--threads", "1"] for name, common in graphs(tmp_path).items()}
    cases = {name: ["mpignn.train", *argv, "--metrics-out", str(tmp_path / f"{name}-2x1.jsonl")]
             for name, argv in argvs.items()}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    rc, out = _pooled(2, 1, [WORKERS / "cli_many.py", tmp_path / "cases.json", tmp_path])
    assert rc == 0 and len(ok_ranks(out)) == 2, out[-3000:]
    for name, argv in argvs.items():
        log = (tmp_path / f"{name}.rank0.log").read_text()
        assert [(tmp_path / f"{name}.rank{r}.rc").read_text() for r in (0, 1)] == ["0", "0"], log[-3000:]
        assert "2 ranks on 2 hosts" in log, log[-3000:]
        one_host = records(tmp_path, train_runs(2, tmp_path, argv, {f"{name}-1x2": []}), f"{name}-1x2")[0]
        two_hosts = [json.loads(line) for line in (tmp_path / f"{name}-2x1.jsonl").read_text().splitlines()]
        assert [same_run(r) for r in two_hosts] == [same_run(r) for r in one_host], name
