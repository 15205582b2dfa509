"""Delivery onto a folder mpignn did not write: refused on every rank (the folder's files survive), accepted
with force; a killed delivery's leftover on the receiving host (dead pid) is removed, a live one's kept. A
receiving host that cannot make the folder: one line on every rank."""
import socket
import subprocess
import sys
from pathlib import Path

from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.errors import PartitionFormatError
from mpignn.fileio import this_host
from mpignn.mpi import run_main, topology, world
from mpignn.partition import deliver, load_partition, partition_graph


def main(base: str) -> None:
    comm = world()
    topo = topology(comm)
    folder = Path(base) / socket.gethostname() / "parts"
    receiver = topo.host_rank > 0 and topo.local_rank == 0
    blocked = Path(base) / socket.gethostname() / "blocked"
    if comm.rank == 0:
        graph = make_synthetic(SyntheticSpec(num_nodes=600, avg_degree=4, num_features=4))
        partition_graph(graph, comm.size, folder)
        partition_graph(graph, comm.size, blocked / "parts")
    elif receiver:  # the user's own folder at the same path
        folder.mkdir(parents=True)
        (folder / "results.csv").write_text("mine\n")
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()
        (folder.parent / f".parts.incoming-{child.pid}@{this_host()}").mkdir()
        blocked.write_text("")  # a file where the folder's parent goes (root writes anywhere else)
    comm.Barrier()
    try:
        deliver.deliver_partition(comm, folder, comm.rank)
        failed = ""
    except PartitionFormatError as exc:
        failed = str(exc)
    assert "refusing to replace" in failed and "HINT:" in failed and "--force" in failed, failed
    assert "\n" not in failed, failed
    if receiver:
        assert (folder / "results.csv").read_text() == "mine\n", "the user's folder was touched"
        assert len(list(folder.parent.glob(".parts.incoming-*"))) == 1, "refused, yet the host was changed"
    sent = deliver.deliver_partition(comm, folder, comm.rank, force=True)
    if comm.rank == 0:
        assert len(sent) == topo.num_hosts - 1, sent
    load_partition(folder, comm.rank)
    if receiver:
        assert not (folder / "results.csv").exists()
        assert not list(folder.parent.glob(".parts.incoming-*")), "the dead delivery's leftover was kept"
    try:
        deliver.deliver_partition(comm, blocked / "parts", comm.rank)
        failed = ""
    except PartitionFormatError as exc:
        failed = str(exc)
    assert "cannot write the partition delivered to" in failed and "\n" not in failed, failed
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1]))
