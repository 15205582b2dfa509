"""The Python API for your own training loop: bootstrap, load this rank's part, build loaders, reduce metrics.
`python -m mpignn.train` is built on it; each call that talks to other ranks says so. Usage: docs/api.md.

Layer 13 (runtime): imports every layer below; never predict or bench.
"""
from mpignn.launch.bootstrap import Runtime, bootstrap, reduce_sums, shutdown
from mpignn.loader.local_graph import LocalGraph
from mpignn.runtime.graph import attach_embedding, build_local_graph, load_local_graph
from mpignn.runtime.link_neighbor_loader import LinkNeighborLoader
from mpignn.runtime.neighbor_loader import NeighborLoader
from mpignn.runtime.results import accuracy, gather_nodes, inference, mean

__all__ = ["Runtime", "LocalGraph", "bootstrap", "load_local_graph", "build_local_graph", "attach_embedding",
           "NeighborLoader", "LinkNeighborLoader", "inference", "gather_nodes", "accuracy", "mean", "reduce_sums",
           "shutdown"]  # docs/api.md, each
