"""Across (emulated) hosts: topology from MPI, per-host rank-0-first, cross-host all-to-all."""
import socket
import sys
from pathlib import Path

import numpy as np

from mpignn.mpi import alltoallv, root_first, run_main, whoami, world


def main(folder: str, hosts: int, per_host: int) -> None:
    comm, topo = world(), whoami()
    assert topo.num_hosts == hosts and topo.local_size == per_host, topo
    names = comm.allgather(socket.gethostname())
    assert len(set(names)) == hosts, names
    with root_first(comm, per_host=True, what="node-local preparation") as first:
        if first:
            (Path(folder) / f"prepared-by-{topo.rank}-on-{topo.host}").write_text("x")
    firsts = sorted(p.name for p in Path(folder).iterdir())
    assert len(firsts) == hosts and any(topo.host in f for f in firsts), firsts
    # every rank sends (rank, dest) pairs to every rank, across the hosts' network
    send = np.array([[comm.rank, d] for d in range(comm.size)], dtype=np.int64)
    got, counts = alltoallv(comm, send, np.ones(comm.size, dtype=np.int64))
    assert got.tolist() == [[r, comm.rank] for r in range(comm.size)], got
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
