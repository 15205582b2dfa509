"""2 ranks, argv ROOT TIMEOUT: a collective entered by a subset of ranks is named well before the timeout. Rank 1
late to a loader (outside any collective) is named in a warning and the job goes on; then rank 0 evaluates alone
(PyG's `if rank == 0: test()`) while rank 1 waits in `dist.barrier()`: the job ends, naming rank 1 and its barrier."""
import sys
import time

import torch.distributed as dist

from mpignn.mpi import run_main
from mpignn.runtime import NeighborLoader, bootstrap, load_local_graph

SMALL = "synthetic:num_nodes=600,avg_degree=6,num_features=4"


def main() -> None:
    rt = bootstrap(logging_setup=False, collective_timeout=float(sys.argv[2]))
    graph = load_local_graph(rt, SMALL, sys.argv[1], cache_size=0, feature_norm="none")
    loader = NeighborLoader(graph, [3], input_nodes="test", batch_size=16)
    if rt.rank == 1:
        time.sleep(8)  # late to the first batch's collectives: a warning names this line
    sum(b.batch_size for b in loader)
    print(f"MPIGNN-LATE-OK rank={rt.rank} t={time.monotonic():.1f}", flush=True)
    if rt.rank == 0:
        sum(b.batch_size for b in loader)  # rank 0 alone: its first step waits for rank 1 forever
    else:
        dist.barrier()
    print("MPIGNN-UNREACHABLE", flush=True)


if __name__ == "__main__":
    run_main(main)
