"""Partition delivery to hosts without the folder: each rank uses a folder of its own host (as node-local
disks give), rank 0 writes; the other host's leader receives its ranks' parts, checked, in small chunks."""
import socket
import sys
from pathlib import Path

import numpy as np

from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.errors import PartitionFormatError
from mpignn.mpi import run_main, topology, transfer, world
from mpignn.partition import deliver, load_partition, partition_graph


def main(base: str) -> None:
    comm = world()
    topo = topology(comm)
    transfer.CHUNK_BYTES = 4096  # many chunks per file
    folder = Path(base) / socket.gethostname() / "parts"
    if comm.rank == 0:
        graph = make_synthetic(SyntheticSpec(num_nodes=3000, avg_degree=8, num_features=12))
        partition_graph(graph, comm.size, folder, method="metis",
                        links={"val": 0.05, "test": 0.1, "num_tails": 5, "seed": 0})
    comm.Barrier()
    sent = deliver.deliver_partition(comm, folder, comm.rank)
    if comm.rank == 0:
        # one leader per other host received, and exactly then
        assert len(sent) == topo.num_hosts - 1 and all(v > 0 for v in sent.values()), sent
    part = load_partition(folder, comm.rank)  # checksums verified
    assert (folder / "links" / "SPLIT.json").is_file()
    if topo.host_rank > 0:
        assert (folder / "node_map.npy").is_file(), "node_map (results read back in original ids) was not delivered"
        held = sorted(p.name for p in folder.glob("part-*"))
        assert len(held) == topo.local_size, held  # only this host's parts
    assert deliver.deliver_partition(comm, folder, comm.rank) == {}, "a complete host received again"
    assert deliver.deliver_partition(comm, folder, comm.size + comm.rank) == {}, "parts the folder lacks"
    # A part corrupt at the sender: the receiving host refuses it on every rank and keeps what it had.
    victim = comm.size - 1
    if comm.rank == 0:
        path = folder / f"part-{victim:03d}" / "x.npy"
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    if topo.host_rank > 0 and topo.local_rank == 0:
        (folder / "META.json").write_text((folder / "META.json").read_text() + " ")  # stale: asks again
    comm.Barrier()
    try:
        deliver.deliver_partition(comm, folder, comm.rank)
        failed = ""
    except PartitionFormatError as exc:
        failed = str(exc)
    if topo.num_hosts > 1:
        assert "wrong sha256" in failed and "HINT:" in failed, failed
        if topo.host_rank > 0:
            assert (folder / "META.json").read_text().endswith(" "), "the old folder was not kept"
            assert not list(folder.parent.glob(".parts.incoming-*")), "a partial delivery was left behind"
    else:
        assert failed == ""
    assert np.array_equal(part.x, load_partition(folder, comm.rank, verify=False).x) or comm.rank == victim
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1]))
