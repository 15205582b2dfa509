"""Node-to-part assignment: METIS (pymetis) with balanced nodes and training nodes, or a random baseline.
numpy only; pymetis is imported inside `metis_parts`."""
from __future__ import annotations

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.errors import ConfigError
from mpignn.mpi import chunk_bounds

__all__ = ["assign_parts", "METHODS"]

METHODS = ("metis", "random")


def random_parts(num_nodes: int, num_parts: int, seed: int) -> np.ndarray:
    """Exactly balanced random parts: a seeded permutation cut by ceiling division."""
    perm = np.random.default_rng(seed).permutation(num_nodes)
    parts = np.empty(num_nodes, dtype=np.int64)
    for p in range(num_parts):
        lo, hi = chunk_bounds(num_nodes, num_parts, p)
        parts[perm[lo:hi]] = p
    return parts


def _symmetric(graph: GraphData) -> tuple[np.ndarray, np.ndarray]:
    """METIS needs an undirected graph without self loops; directed inputs are symmetrised."""
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.rowptr))
    src = np.asarray(graph.col)
    return csr_from_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), graph.num_nodes,
                          drop_self_loops=True)


def metis_parts(graph: GraphData, num_parts: int, seed: int) -> np.ndarray:
    """METIS k-way with two vertex-weight constraints (every node, training nodes), so each part gets a fair
    share of both the graph and the training work; deterministic for a seed."""
    try:
        import pymetis
    except ImportError:
        raise ConfigError("--method metis needs pymetis; it is not installed. HINT: pip install pymetis, or "
                          "use --method random") from None
    if num_parts == 1:
        return np.zeros(graph.num_nodes, dtype=np.int64)
    idx = pymetis.zero_copy_dtype()
    rowptr, col = _symmetric(graph)
    is_train = np.zeros(graph.num_nodes, dtype=idx)
    is_train[graph.train_idx] = 1
    vweights = np.stack([np.ones(graph.num_nodes, dtype=idx), is_train], axis=1).reshape(-1)
    if not is_train.any():
        vweights = None
    result = pymetis.part_graph(num_parts, adjacency=pymetis.CSRAdjacency(rowptr.astype(idx), col.astype(idx)),
                                vweights=vweights, options=pymetis.Options(seed=seed))
    return np.asarray(result.vertex_part, dtype=np.int64)


def assign_parts(graph: GraphData, num_parts: int, method: str, seed: int) -> np.ndarray:
    """Part id of every node.

    Raises:
        ConfigError: unknown method, or more parts than nodes.
    """
    if method not in METHODS:
        raise ConfigError(f"--method must be one of {', '.join(METHODS)}; got '{method}'. HINT: --method metis")
    if not 1 <= num_parts <= graph.num_nodes:
        raise ConfigError(f"--num-parts must be between 1 and the node count {graph.num_nodes}; got {num_parts}. "
                          "HINT: use fewer parts (ranks) than nodes")
    if method == "random":
        return random_parts(graph.num_nodes, num_parts, seed)
    return metis_parts(graph, num_parts, seed)
