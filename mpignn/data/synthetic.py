"""The embedded default dataset: a deterministic graph with community structure. numpy only.

Nodes sit in small clusters; most edges stay inside a cluster (so METIS finds a good cut), degrees are
heavy-tailed, labels mostly follow the cluster's class, and features are the label's centroid under heavy
noise: a GNN, which averages neighbours, clearly beats an MLP, which sees one noisy node.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.errors import DatasetError

__all__ = ["SyntheticSpec", "make_synthetic", "parse_synthetic"]


@dataclass(frozen=True)
class SyntheticSpec:
    """Options of `synthetic:key=value,...`."""

    num_nodes: int = 100_000
    avg_degree: int = 15
    num_features: int = 64
    num_classes: int = 8
    cluster_size: int = 500
    intra: float = 0.85
    """Fraction of edges that stay inside their cluster."""
    label_noise: float = 0.15
    """Fraction of nodes whose label is random instead of their cluster's class."""
    feature_noise: float = 8.0
    """Std of the Gaussian noise on features (the centroids have unit scale)."""
    train: float = 0.3
    val: float = 0.1
    test: float = 0.2
    seed: int = 0


def parse_synthetic(options: str) -> SyntheticSpec:
    """`num_nodes=2000000,avg_degree=25` -> SyntheticSpec; errors name the bad key or value."""
    known = {f.name: f.type for f in fields(SyntheticSpec)}
    values: dict[str, object] = {}
    for item in filter(None, options.split(",")):
        key, _, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if key not in known or not raw:
            raise DatasetError(f"synthetic options are key=value with keys {', '.join(known)}; got '{item}'. "
                               "HINT: e.g. --dataset synthetic:num_nodes=200000,avg_degree=20")
        try:
            values[key] = float(raw) if known[key] == "float" else int(float(raw))
        except ValueError:
            raise DatasetError(f"synthetic option {key} needs a number; got '{raw}'") from None
    spec = SyntheticSpec(**values)  # type: ignore[arg-type]
    if spec.num_nodes < 2 or spec.avg_degree < 1 or spec.num_classes < 2 or spec.num_features < 1:
        raise DatasetError(f"synthetic graph too small: {spec}. HINT: num_nodes>=2, avg_degree>=1, "
                           "num_classes>=2, num_features>=1")
    return spec


def make_synthetic(spec: SyntheticSpec = SyntheticSpec()) -> GraphData:
    """Generate the graph; the same spec gives the same graph on every rank and machine."""
    rng = np.random.default_rng(spec.seed)
    n, c = spec.num_nodes, spec.num_classes
    cluster_size = max(2, min(spec.cluster_size, n))
    # Heavy-tailed out-degrees with mean avg_degree / 2; symmetrising doubles them.
    half = spec.avg_degree / 2.0
    out_deg = np.maximum(1, np.rint(rng.lognormal(np.log(half) - 0.5, 1.0, size=n))).astype(np.int64)
    src = np.repeat(np.arange(n, dtype=np.int64), out_deg)
    m = len(src)
    cluster_start = (src // cluster_size) * cluster_size
    cluster_len = np.minimum(cluster_size, n - cluster_start)
    intra = rng.random(m) < spec.intra
    dst = np.where(intra, cluster_start + (rng.random(m) * cluster_len).astype(np.int64),
                   rng.integers(0, n, size=m))
    del cluster_start, cluster_len, intra
    # Hide the cluster order, so node ids carry no locality (a contiguous split is no better than random).
    perm = rng.permutation(n).astype(np.int64)
    src, dst = perm[src], perm[dst]
    rowptr, col = csr_from_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), n, drop_self_loops=True)
    del src, dst

    cluster_class = (np.arange(n, dtype=np.int64) // cluster_size) % c
    y = np.empty(n, dtype=np.int64)
    y[perm] = cluster_class
    noisy = rng.random(n) < spec.label_noise
    y[noisy] = rng.integers(0, c, size=int(noisy.sum()))
    centroids = rng.standard_normal((c, spec.num_features), dtype=np.float32)
    x = rng.standard_normal((n, spec.num_features), dtype=np.float32)
    x *= np.float32(spec.feature_noise)
    x += centroids[y]
    x *= np.float32(1.0 / max(1.0, spec.feature_noise))  # unit-scale inputs; the signal-to-noise ratio stays

    order = rng.permutation(n)
    n_train, n_val, n_test = (int(round(f * n)) for f in (spec.train, spec.val, spec.test))
    train_idx = np.sort(order[:n_train])
    val_idx = np.sort(order[n_train:n_train + n_val])
    test_idx = np.sort(order[n_train + n_val:n_train + n_val + n_test])
    return GraphData(name="synthetic", rowptr=rowptr, col=col, x=x, y=y, train_idx=train_idx, val_idx=val_idx,
                     test_idx=test_idx, num_classes=c, meta={"spec": spec.__dict__})
