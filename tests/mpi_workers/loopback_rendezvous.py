"""Across hosts whose /etc/hosts maps their own name to 127.0.1.1 (Debian style): torch.distributed (gloo)
still meets, on a routable address. MODES, comma-separated, run one after another in one job, each from the job's
own environment: auto (subnet found over MPI) | ifname (MPIGNN_SOCKET_IFNAME=eth0) | badifname (names no
interface: every rank must fail at once, well within the rendezvous timeout, with the fix)."""
import ipaddress
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

from cli_many import end, in_turn

from mpignn.launch.process_group import Choice, destroy_process_group, init_process_group
from mpignn.errors import LaunchError
from mpignn.mpi import run_main, whoami, world


def _meet(mode: str) -> None:
    assert socket.gethostbyname(socket.gethostname()) == "127.0.1.1", "the loopback mapping is not in place"
    topo = whoami()
    assert topo.num_hosts >= 2, topo
    if mode != "auto":
        os.environ["MPIGNN_SOCKET_IFNAME"] = "eth0" if mode == "ifname" else "nope0"
    start = time.monotonic()
    try:
        init_process_group(world(), topo.rank, topo.world_size, topo.local_rank, topo.local_size,
                           Choice("cpu", "gloo"), timeout_s=30)
    except LaunchError as exc:
        assert mode == "badifname", exc
        assert "MPIGNN_SOCKET_IFNAME=nope0" in str(exc) and "HINT" in str(exc) and "\n" not in str(exc), exc
        assert time.monotonic() - start < 15, "the refusal waited for the rendezvous timeout"
        print(f"MPIGNN-OK rank={topo.rank} mode={mode} refused", flush=True)
        return
    assert mode != "badifname", "an interface that does not exist was accepted"
    assert not ipaddress.ip_address(os.environ["MASTER_ADDR"]).is_loopback, os.environ["MASTER_ADDR"]
    assert os.environ.get("GLOO_SOCKET_IFNAME") == "eth0", os.environ.get("GLOO_SOCKET_IFNAME")
    t = torch.tensor([float(topo.rank + 1)])
    dist.all_reduce(t)
    n = topo.world_size
    assert t.item() == n * (n + 1) / 2, t
    destroy_process_group()
    print(f"MPIGNN-OK rank={topo.rank} mode={mode} addr={os.environ['MASTER_ADDR']}", flush=True)


if __name__ == "__main__":
    end(run_main(in_turn, sys.argv[1], _meet))
