"""MPI-driven rendezvous (no MASTER_ADDR/PORT by hand), then an all-reduce over gloo, in the default group and a new one."""
import sys

import torch
import torch.distributed as dist

from mpignn.launch.process_group import Choice, destroy_process_group, init_process_group
from mpignn.mpi import run_main, whoami, world


def main() -> None:
    topo = whoami()
    init_process_group(world(), topo.rank, topo.world_size, topo.local_rank, topo.local_size, Choice("cpu", "gloo"))
    t = torch.tensor([float(topo.rank + 1)])
    dist.all_reduce(t)
    n = topo.world_size
    assert t.item() == n * (n + 1) / 2, t
    group = dist.new_group(list(range(n)))  # a second group meets through the same (MPI) store
    dist.all_reduce(t, group=group)
    assert t.item() == n * n * (n + 1) / 2, t
    assert topo.local_size == n and topo.num_hosts == 1, topo
    destroy_process_group()
    print(f"MPIGNN-OK rank={topo.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main))
