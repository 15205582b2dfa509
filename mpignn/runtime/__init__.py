"""The Python API for your own training loop: bootstrap, load this rank's part, build loaders, reduce metrics.

`python -m mpignn.train` is built on these functions. Each one that talks to other ranks says so.

    rt = bootstrap()                                   # MPI topology, threads, device, torch.distributed
    graph = load_local_graph(rt, "synthetic")          # rank 0 prepares + partitions; each rank loads its part
    loader = make_loader(rt, graph, "train", [15, 10, 5], batch_size=1024)   # graph.task's seeds of the split
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader: ...                       # PyG Data on rt.device, seeds first
    totals = reduce_sums(rt, {"correct": c, "total": n})

Layer 13 (runtime): imports every layer below; never predict or bench.
"""
from mpignn.runtime.graph import *  # noqa: F401,F403
from mpignn.runtime.graph import __all__  # noqa: F401
