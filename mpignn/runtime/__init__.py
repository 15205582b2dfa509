"""The Python API for your own training loop: bootstrap, load this rank's part, build loaders, reduce metrics.

`python -m mpignn.train` is built on these functions. Each one that talks to other ranks says so.

    rt = bootstrap()                                   # MPI topology, threads, device, torch.distributed
    graph = load_local_graph(rt, "synthetic")          # rank 0 prepares + partitions; each rank loads its part
    loader = NeighborLoader(graph, [15, 10, 5], input_nodes="train", batch_size=1024, shuffle=True)
    for epoch in range(3):
        for batch in loader: ...                       # PyG Data on rt.device, seeds first, dataset ids
    acc = accuracy(rt, pred, y)                        # over all ranks, weighted by items
    out = inference(model, graph)                      # every own node, layer by layer, exactly
    every = gather_nodes(rt, graph, out)               # on rank 0: every node's row, in the dataset's order

`NeighborLoader(..., minibatch="cooperative")` (or "full") gives the training CLI's other batch modes;
`LinkNeighborLoader(graph, [15, 10], neg_sampling="binary", batch_size=512)` batches seed edges as PyG's.

Layer 13 (runtime): imports every layer below; never predict or bench.
"""
from mpignn.launch.bootstrap import Runtime, bootstrap, reduce_sums, shutdown
from mpignn.loader.local_graph import LocalGraph
from mpignn.runtime.graph import attach_embedding, build_local_graph, load_local_graph
from mpignn.runtime.exact_inference import inference
from mpignn.runtime.gather import gather_nodes
from mpignn.runtime.metrics import accuracy, mean
from mpignn.runtime.link_neighbor_loader import LinkNeighborLoader
from mpignn.runtime.neighbor_loader import NeighborLoader

__all__ = ["Runtime", "LocalGraph", "bootstrap", "load_local_graph", "build_local_graph", "attach_embedding",
           "NeighborLoader", "LinkNeighborLoader", "inference", "gather_nodes", "accuracy", "mean", "reduce_sums",
           "shutdown"]  # docs/api.md, each
