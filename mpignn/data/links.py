"""Link prediction data: a seeded split of the edges into message-passing (= training) edges and held-out
validation and test edges with fixed negatives, as PyG's `RandomLinkSplit`. numpy only.
A held-out pair is removed in both directions, so no message runs along a scored edge (no leakage).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.errors import DatasetError

__all__ = ["LinkSplit", "split_links", "undirected_pairs"]


@dataclass
class LinkSplit:
    """Held-out edges in the graph's ids: `*_pos` and `*_neg` (one per positive, for AUC) [2, k] pairs,
    `*_neg_tails` [k, K] corrupted targets per positive (for MRR and Hits@K)."""

    val_pos: np.ndarray
    test_pos: np.ndarray
    val_neg: np.ndarray
    test_neg: np.ndarray
    val_neg_tails: np.ndarray
    test_neg_tails: np.ndarray


def undirected_pairs(rowptr: np.ndarray, col: np.ndarray, lo: int = 0) -> np.ndarray:
    """[2, k] pairs (a, b), a < b, one per undirected edge of a CSR by target whose rows are ids [lo, lo + rows)."""
    rows = np.repeat(np.arange(lo, lo + len(rowptr) - 1, dtype=np.int64), np.diff(rowptr))
    keep = rows < col
    return np.stack([rows[keep], col[keep]])


def _edge_keys(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    return lo * np.int64(n) + hi


def _non_edges(rng: np.random.Generator, count: int, n: int, edge_keys: np.ndarray,
               src: np.ndarray | None = None) -> np.ndarray:
    """`count` pairs that are not edges (or targets for the given sources), drawn uniformly, redrawing hits."""
    out_src = np.empty(count, dtype=np.int64) if src is None else np.asarray(src, dtype=np.int64)
    out_dst = np.empty(count, dtype=np.int64)
    todo = np.arange(count)
    for _ in range(100):
        if src is None:
            out_src[todo] = rng.integers(0, n, len(todo))
        out_dst[todo] = rng.integers(0, n, len(todo))
        keys = _edge_keys(out_src[todo], out_dst[todo], n)
        pos = np.searchsorted(edge_keys, keys)
        hit = (pos < len(edge_keys)) & (edge_keys[np.minimum(pos, len(edge_keys) - 1)] == keys)
        hit |= out_src[todo] == out_dst[todo]
        todo = todo[hit]
        if not len(todo):
            return np.stack([out_src, out_dst])
    raise DatasetError(f"could not draw {count} negative pairs among {n} nodes: the graph is too dense. "
                       "HINT: use a sparser graph for link prediction")


def split_links(graph: GraphData, val: float = 0.05, test: float = 0.1, seed: int = 0,
                num_tails: int = 100) -> tuple[GraphData, LinkSplit]:
    """Hold out `val` and `test` shares of the undirected edges; return the graph without them and the split."""
    if not (0 < val and 0 < test and val + test < 1):
        raise DatasetError(f"link split shares must be positive and sum below 1; got val {val}, test {test}. "
                           "HINT: e.g. 0.05 and 0.1")
    n = graph.num_nodes
    pairs = undirected_pairs(graph.rowptr, graph.col)
    m = pairs.shape[1]
    n_val, n_test = int(round(val * m)), int(round(test * m))
    if n_val < 1 or n_test < 1 or m - n_val - n_test < 1:
        raise DatasetError(f"{graph.name} has {m} undirected edges: too few to hold out {val:.0%} for validation "
                           f"and {test:.0%} for test. HINT: link prediction needs a graph with edges")
    rng = np.random.default_rng([seed, 4242])
    order = rng.permutation(m)
    val_pos, test_pos = pairs[:, order[:n_val]], pairs[:, order[n_val:n_val + n_test]]
    train = pairs[:, order[n_val + n_test:]]
    keys = np.sort(_edge_keys(pairs[0], pairs[1], n))  # every edge, held out or not, is no negative
    split = LinkSplit(
        val_pos=val_pos, test_pos=test_pos,
        val_neg=_non_edges(rng, n_val, n, keys), test_neg=_non_edges(rng, n_test, n, keys),
        val_neg_tails=_non_edges(rng, n_val * num_tails, n, keys, np.repeat(val_pos[0], num_tails))[1]
        .reshape(n_val, num_tails),
        test_neg_tails=_non_edges(rng, n_test * num_tails, n, keys, np.repeat(test_pos[0], num_tails))[1]
        .reshape(n_test, num_tails))
    rowptr, col = csr_from_edges(train[0], train[1], n, symmetric=True)
    kept = GraphData(name=graph.name, rowptr=rowptr, col=col, x=graph.x, y=graph.y, train_idx=graph.train_idx,
                     val_idx=graph.val_idx, test_idx=graph.test_idx, num_classes=graph.num_classes,
                     meta={**graph.meta, "link_split": {"val": val, "test": test, "seed": seed,
                                                       "num_tails": num_tails}})
    return kept, split
