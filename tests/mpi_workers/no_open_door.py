"""After init_process_group no socket it opened listens on all interfaces; the host's other addresses refuse
their ports. MODES, comma-separated, run in turn in one job, each from the job's own environment and counting only
the listeners it opened: mpi (store over MPI) | port (MASTER_PORT by hand) | badport (rank 0's port taken: all
fail)."""
import errno
import ipaddress
import os
import socket
import sys

import torch
import torch.distributed as dist

from cli_many import end, in_turn

from mpignn.launch.process_group import Choice, destroy_process_group, init_process_group
from mpignn.env import ipv4_interfaces
from mpignn.errors import LaunchError
from mpignn.mpi import run_main, whoami, world


def listeners() -> set[tuple[str, int]]:
    """(address, port) of this process's TCP sockets in LISTEN state (0A), matched by inode in /proc."""
    fds = [f"/proc/self/fd/{fd}" for fd in os.listdir("/proc/self/fd")]
    inodes = {os.readlink(f)[8:-1] for f in fds if os.path.exists(f) and os.readlink(f).startswith("socket:")}
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for cols in (line.split() for line in open(table).read().splitlines()[1:]):
            if cols[3] == "0A" and cols[9] in inodes:
                raw, port = cols[1].split(":")  # hex, in 32-bit host-order (little-endian) words
                packed = b"".join(bytes.fromhex(raw[i:i + 8])[::-1] for i in range(0, len(raw), 8))
                found.add((str(ipaddress.ip_address(packed)), int(port, 16)))
    return found


def _open(mode: str) -> None:
    topo = whoami()
    inherited = listeners()  # Hydra's proxy leaks its own 0.0.0.0 listener into each rank: not ours
    blocker = socket.create_server(("", 0)) if mode == "badport" else None
    if mode != "mpi":
        os.environ["MASTER_PORT"] = str(blocker.getsockname()[1] if blocker else 29400 + os.getppid() % 500)
    try:
        init_process_group(world(), topo.rank, topo.world_size, topo.local_rank, topo.local_size,
                           Choice("cpu", "gloo"), timeout_s=60)
    except LaunchError as exc:
        assert mode == "badport" and "MASTER_PORT" in str(exc) and "HINT" in str(exc), exc
        blocker.close()
        return print(f"MPIGNN-OK rank={topo.rank} mode={mode} refused", flush=True)
    opened = listeners() - inherited  # the store's and gloo's
    assert not [a for a, _ in opened if ipaddress.ip_address(a).is_unspecified], f"all interfaces: {opened}"
    store = {(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))} if "MASTER_PORT" in os.environ else set()
    probes = opened | store  # the store's port: hand-set, or the one the old code picked and exported
    mine = [i.address for i in ipv4_interfaces()]
    answered = [(h, p) for bound, p in probes for h in mine if h != bound and socket.socket().connect_ex((h, p))
                not in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH)]
    assert not answered, f"answered on another address of this host: {answered} (listeners {opened})"
    dist.all_reduce(t := torch.ones(1))  # the group still works
    assert t.item() == topo.world_size, t
    destroy_process_group()
    print(f"MPIGNN-OK rank={topo.rank} mode={mode} listeners={sorted(opened)} probed={len(probes)}x{len(mine)}", flush=True)


if __name__ == "__main__":
    end(run_main(in_turn, sys.argv[1], _open))
