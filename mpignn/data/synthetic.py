"""The embedded default dataset: a deterministic graph with community structure. numpy only.

Most edges stay inside small clusters (so METIS finds a good cut), and features are the label's centroid under
heavy noise: a GNN, which averages neighbours, clearly beats an MLP, which sees one noisy node.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterator

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.npy import write_npy_folder
from mpignn.data.npyio import NpyWriter, refuse_beyond_memory, rows_per_chunk
from mpignn.errors import DatasetError
from mpignn.fileio import atomic_dir

__all__ = ["SyntheticSpec", "make_synthetic", "write_synthetic", "parse_synthetic"]


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


_FRACTIONS = ("intra", "label_noise", "train", "val", "test")
"""The options that are shares of the edges or nodes."""


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
            number = float(raw)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):  # inf overflows int(), nan passes every range check below
            raise DatasetError(f"synthetic option {key} needs a finite number; got '{raw}'. HINT: e.g. --dataset "
                               f"synthetic:{key}={getattr(SyntheticSpec, key)}")
        values[key] = number if known[key] == "float" else int(number)
    spec = SyntheticSpec(**values)  # type: ignore[arg-type]
    if spec.num_nodes < 2 or spec.avg_degree < 1 or spec.num_classes < 2 or spec.num_features < 1:
        raise DatasetError(f"synthetic graph too small: {spec}. HINT: num_nodes>=2, avg_degree>=1, "
                           "num_classes>=2, num_features>=1")
    for key in _FRACTIONS:
        if not 0 <= getattr(spec, key) <= 1:
            raise DatasetError(f"synthetic option {key} is a fraction in [0, 1]; got {getattr(spec, key)}. HINT: "
                               f"e.g. --dataset synthetic:{key}={getattr(SyntheticSpec, key)}")
    if spec.train + spec.val + spec.test > 1 + 1e-9:  # disjoint shares of the nodes: more silently shrank val, test
        raise DatasetError(f"synthetic options train+val+test are shares of the nodes; got {spec.train}+{spec.val}+"
                           f"{spec.test} = {spec.train + spec.val + spec.test:g}, more than 1. HINT: lower some so "
                           "they add up to at most 1, e.g. train=0.6,val=0.2,test=0.2")
    for key in ("train", "val", "test"):  # npz and npy graphs refuse an empty split too
        if getattr(spec, key) == 0:
            raise DatasetError(f"synthetic option {key}=0 leaves the {key} split empty; every split needs nodes. "
                               f"HINT: e.g. --dataset synthetic:{key}={getattr(SyntheticSpec, key)}")
    if spec.seed < 0:  # numpy refuses a negative seed
        raise DatasetError(f"synthetic option seed must be 0 or more; got {spec.seed}. HINT: e.g. --dataset "
                           "synthetic:seed=1")
    return spec


def _structure(spec: SyntheticSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rowptr, col, perm); temporaries int32 below 2^31 nodes."""
    n = spec.num_nodes
    cluster_size = max(2, min(spec.cluster_size, n))
    ids = np.int32 if n < 2**31 else np.int64
    # Heavy-tailed out-degrees with mean avg_degree / 2; symmetrising doubles them.
    half = spec.avg_degree / 2.0
    out_deg = np.maximum(1, np.rint(rng.lognormal(np.log(half) - 0.5, 1.0, size=n))).astype(np.int64)
    src = np.repeat(np.arange(n, dtype=ids), out_deg)
    m = len(src)
    del out_deg
    intra = rng.random(m) < spec.intra
    uniform = rng.random(m)
    dst = np.empty(m, dtype=ids)
    step = 1 << 22
    for lo in range(0, m, step):
        cluster_start = (src[lo:lo + step].astype(np.int64) // cluster_size) * cluster_size
        cluster_len = np.minimum(cluster_size, n - cluster_start)
        dst[lo:lo + step] = cluster_start + (uniform[lo:lo + step] * cluster_len).astype(np.int64)
    del uniform
    far = rng.integers(0, n, size=m)
    np.copyto(dst, far, where=~intra, casting="unsafe")
    del far, intra
    # Hide the cluster order, so node ids carry no locality (a contiguous split is no better than random).
    perm = rng.permutation(n).astype(np.int64)
    for lo in range(0, m, step):
        src[lo:lo + step] = perm[src[lo:lo + step]]
        dst[lo:lo + step] = perm[dst[lo:lo + step]]
    rowptr, col = csr_from_edges(src, dst, n, drop_self_loops=True, symmetric=True)
    return rowptr, col, perm


def _labels(spec: SyntheticSpec, rng: np.random.Generator, perm: np.ndarray) -> np.ndarray:
    n, c = spec.num_nodes, spec.num_classes
    cluster_size = max(2, min(spec.cluster_size, n))
    y = np.empty(n, dtype=np.int64)
    y[perm] = (np.arange(n, dtype=np.int64) // cluster_size) % c
    noisy = rng.random(n) < spec.label_noise
    y[noisy] = rng.integers(0, c, size=int(noisy.sum()))
    return y


def _feature_chunks(spec: SyntheticSpec, rng: np.random.Generator, y: np.ndarray,
                    chunk_rows: int) -> Iterator[np.ndarray]:
    """Row chunks of one (n, F) draw: the generator's stream continues across calls (tests/test_npy.py)."""
    centroids = rng.standard_normal((spec.num_classes, spec.num_features), dtype=np.float32)
    for lo in range(0, spec.num_nodes, chunk_rows):
        x = rng.standard_normal((min(chunk_rows, spec.num_nodes - lo), spec.num_features), dtype=np.float32)
        x *= np.float32(spec.feature_noise)
        x += centroids[y[lo:lo + len(x)]]
        x *= np.float32(1.0 / max(1.0, spec.feature_noise))  # unit-scale inputs; the signal-to-noise ratio stays
        yield x


def _splits(spec: SyntheticSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = spec.num_nodes
    order = rng.permutation(n)
    n_train, n_val, n_test = (int(round(f * n)) for f in (spec.train, spec.val, spec.test))
    return {"train_idx": np.sort(order[:n_train]), "val_idx": np.sort(order[n_train:n_train + n_val]),
            "test_idx": np.sort(order[n_train + n_val:n_train + n_val + n_test])}


def _start(spec: SyntheticSpec, row_bytes: int = 0) -> tuple[np.random.Generator, np.ndarray, np.ndarray, np.ndarray]:
    """(the generator, rowptr, col, y): the draws both writers make first, in the same order. Refused first where
    a lower bound of what the writer holds (the symmetrised edges' int64 col, two int64 node arrays, the class
    centroids, `row_bytes` a node) exceeds this host's memory: one line, not a MemoryError after minutes."""
    refuse_beyond_memory(f"synthetic graph {spec}", spec.num_nodes * (8 * spec.avg_degree + 16 + row_bytes)
                         + 4 * spec.num_classes * spec.num_features,
                         "generating it needs at least {need} GiB but this host has {memory} GiB of memory",
                         "fewer num_nodes, a lower avg_degree, or fewer num_classes x num_features")
    rng = np.random.default_rng(spec.seed)
    rowptr, col, perm = _structure(spec, rng)
    return rng, rowptr, col, _labels(spec, rng, perm)


def make_synthetic(spec: SyntheticSpec = SyntheticSpec()) -> GraphData:
    """Generate the graph in memory; the same spec gives the same graph on every rank and machine."""
    rng, rowptr, col, y = _start(spec, row_bytes=4 * spec.num_features)  # x is held whole
    x = np.concatenate(list(_feature_chunks(spec, rng, y, spec.num_nodes)))
    return GraphData(name="synthetic", rowptr=rowptr, col=col, x=x, y=y, num_classes=spec.num_classes,
                     meta={"spec": spec.__dict__}, **_splits(spec, rng))


def write_synthetic(spec: SyntheticSpec, folder: str | os.PathLike) -> Path:
    """Generate `make_synthetic`'s graph into an npy folder, features in chunks (never held whole); atomic."""
    rng, rowptr, col, y = _start(spec)
    chunk_rows = rows_per_chunk(4 * spec.num_features)
    # The splits are drawn after the features: hold the structure and labels, stream x, then draw them.
    with atomic_dir(folder) as tmp:
        with NpyWriter(tmp / "x.npy", (spec.num_nodes, spec.num_features), np.float32) as out:
            for chunk in _feature_chunks(spec, rng, y, chunk_rows):
                out.write(chunk)
        write_npy_folder(tmp, rowptr=rowptr, col=col, y=y, num_classes=spec.num_classes, name="synthetic",
                         meta={"spec": spec.__dict__}, **_splits(spec, rng))
    return Path(folder)
