"""Process group on an accelerator (argv: device type, backend): rendezvous over MPI, then an all-reduce and
a feature-row all-to-all on device tensors, which must stay on the device."""
import sys

import numpy as np
import torch
import torch.distributed as dist

from mpignn.launch.process_group import choose, destroy_process_group, detect_hardware, init_process_group
from mpignn.exchange.alltoall import TorchAlltoall
from mpignn.mpi import run_main, whoami, world


def main(device_type: str, backend: str) -> None:
    topo = whoami()
    choice = choose(device_type, backend, detect_hardware(), topo.local_rank, topo.local_size)
    init_process_group(world(), topo.rank, topo.world_size, topo.local_rank, topo.local_size, choice)
    t = torch.full((4,), float(topo.rank + 1), device=choice.device)
    dist.all_reduce(t)
    n = topo.world_size
    assert t.device.type == device_type and t[0].item() == n * (n + 1) / 2, t
    rows = torch.full((n, 3), float(topo.rank), device=choice.device)  # one row for each rank
    got = TorchAlltoall(world(), choice.device).rows(rows, np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64))
    assert got.device.type == device_type and got[:, 0].tolist() == [float(r) for r in range(n)], got
    destroy_process_group()
    print(f"MPIGNN-OK rank={topo.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1], sys.argv[2]))
