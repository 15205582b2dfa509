"""The Python API for your own training loop: bootstrap, load this rank's part, build loaders, reduce metrics.

`python -m mpignn.train` is built on these functions. Each one that talks to other ranks says so.

    rt = bootstrap()                                   # MPI topology, threads, device, torch.distributed
    graph = load_local_graph(rt, "synthetic")          # rank 0 prepares + partitions; each rank loads its part
    loader = NeighborLoader(graph, [15, 10, 5], input_nodes="train", batch_size=1024, shuffle=True)
    for epoch in range(3):
        for batch in loader: ...                       # PyG Data on rt.device, seeds first, dataset ids
    acc = accuracy(rt, pred, y)                        # over all ranks, weighted by items
    out = inference(model, graph)                      # every own node, layer by layer, exactly

`make_loader` is what `python -m mpignn.train` uses (a task's seeds, cooperative mini-batches).

Layer 13 (runtime): imports every layer below; never predict or bench.
"""
from mpignn.config.graph_options import GraphOptions
from mpignn.exchange.cache_policy import cache_budget
from mpignn.launch.bootstrap import Runtime, bootstrap, reduce_sums, shutdown
from mpignn.loader.local_graph import LocalGraph
from mpignn.loader.prefetch import overlap
from mpignn.partition.source import auto_folder
from mpignn.runtime.graph import attach_embedding, build_graph_and_model, build_local_graph, load_local_graph
from mpignn.runtime.loaders import cooperative_refusal, full_fit_problem, make_loader, rank_batch_size
from mpignn.runtime.exact_inference import inference
from mpignn.runtime.metrics import accuracy, mean
from mpignn.runtime.neighbor_loader import NeighborLoader

__all__ = ["Runtime", "LocalGraph", "GraphOptions", "bootstrap", "load_local_graph", "build_local_graph",
           "attach_embedding", "make_loader", "reduce_sums", "shutdown", "rank_batch_size", "overlap", "cache_budget",
           "auto_folder", "cooperative_refusal", "full_fit_problem",
           "build_graph_and_model", "NeighborLoader", "accuracy", "mean",
           "inference"]
