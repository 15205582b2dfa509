"""Heterogeneous graphs as data: node types are contiguous global id ranges, edge types an int8 array beside
`col` (each row's in-edges sorted by type), so every stage runs the homogeneous code on one id space and reads
the types where it needs them. `x` is zero-padded to the widest type. numpy only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.errors import ConfigError, DatasetError

__all__ = ["HeteroSchema", "build_hetero", "type_rowptr", "edge_type_name", "type_of", "hop_fanouts"]

EdgeType = tuple[str, str, str]


def edge_type_name(edge_type: Sequence[str]) -> str:
    """`src__rel__dst`, the name `--edge-fanout` and reports use (PyG's own join)."""
    return "__".join(edge_type)


@dataclass(frozen=True)
class HeteroSchema:
    """Node and edge types of a heterogeneous graph and which node type is classified."""

    node_types: tuple[str, ...]
    node_counts: tuple[int, ...]
    edge_types: tuple[EdgeType, ...]
    feature_dims: tuple[int, ...]  # 0: featureless (learnable rows with --embed-dim, else a constant input)
    target: str

    @property
    def offsets(self) -> np.ndarray:
        return np.cumsum([0, *self.node_counts], dtype=np.int64)

    @property
    def num_etypes(self) -> int:
        return len(self.edge_types)

    def type_index(self, name: str) -> int:
        return self.node_types.index(name)

    def to_json(self) -> dict:
        return {"node_types": list(self.node_types), "node_counts": list(self.node_counts),
                "edge_types": [list(e) for e in self.edge_types], "feature_dims": list(self.feature_dims),
                "target": self.target}

    @classmethod
    def from_json(cls, d: Mapping) -> "HeteroSchema":
        return cls(tuple(d["node_types"]), tuple(int(c) for c in d["node_counts"]),
                   tuple(tuple(e) for e in d["edge_types"]), tuple(int(f) for f in d["feature_dims"]),
                   str(d["target"]))


def type_of(gids: np.ndarray, starts: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """Node type of each global id, given the sorted first ids of the id blocks and each block's type."""
    return kinds[np.searchsorted(starts, gids, side="right") - 1]


def hop_fanouts(fanouts: Sequence[int], edge_fanouts: Mapping[str, Sequence[int]] | None,
                schema: HeteroSchema | None) -> list:
    """Each hop's fanout: the --fanout number, or one per edge type where `edge_fanouts` sets them."""
    if not edge_fanouts:
        return list(fanouts)
    if schema is None:
        raise ConfigError("--edge-fanout sets fanouts per edge type, and this graph has one edge type. HINT: "
                          "drop --edge-fanout and set --fanout")
    names = [edge_type_name(e) for e in schema.edge_types]
    unknown = sorted(set(edge_fanouts) - set(names))
    if unknown:
        raise ConfigError(f"--edge-fanout names edge type(s) {', '.join(unknown)} the graph does not have. HINT: "
                          f"its edge types are {', '.join(names)}")
    return [[int(edge_fanouts[n][h]) if n in edge_fanouts else int(f) for n in names]
            for h, f in enumerate(fanouts)]


def type_rowptr(rowptr: np.ndarray, edge_type: np.ndarray, num_etypes: int) -> np.ndarray:
    """[num_rows * num_etypes + 1] pointers of each (row, edge type) run, for rows sorted by edge type."""
    rows = len(rowptr) - 1
    dst = np.repeat(np.arange(rows, dtype=np.int64), np.diff(rowptr))
    counts = np.bincount(dst * num_etypes + np.asarray(edge_type, dtype=np.int64), minlength=rows * num_etypes)
    out = np.zeros(rows * num_etypes + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def build_hetero(name: str, counts: Mapping[str, int], edges: Mapping[EdgeType, np.ndarray],
                 x: Mapping[str, np.ndarray], target: str, y: np.ndarray, splits: Mapping[str, np.ndarray],
                 num_classes: int | None = None) -> GraphData:
    """A heterogeneous GraphData from per-type parts (ids local to their type, as PyG's HeteroData holds them);
    `counts`' order is the global ids' order."""
    node_types = tuple(counts)
    if target not in counts:
        raise DatasetError(f"{name}: target node type '{target}' is not one of {', '.join(node_types)}. HINT: "
                           "name the classified type in target_type")
    edge_types = tuple(tuple(e) for e in edges)
    dims = tuple(int(np.asarray(x[t]).shape[1]) if t in x else 0 for t in node_types)
    schema = HeteroSchema(node_types, tuple(int(counts[t]) for t in node_types), edge_types, dims, target)
    offsets = schema.offsets
    base = {t: offsets[i] for i, t in enumerate(node_types)}
    src_all, dst_all = [], []
    for k, (et, ei) in enumerate(edges.items()):
        s, _, d = et
        if s not in base or d not in base:
            raise DatasetError(f"{name}: edge type {edge_type_name(et)} names an unknown node type. HINT: node "
                               f"types are {', '.join(node_types)}")
        ei = np.asarray(ei, dtype=np.int64).reshape(2, -1)
        for side, t in ((ei[0], s), (ei[1], d)):
            if len(side) and (side.min() < 0 or side.max() >= counts[t]):
                raise DatasetError(f"{name}: edge type {edge_type_name(et)} has {t} ids outside 0..{counts[t] - 1}. "
                                   "HINT: edge ids are local to their node type")
        src_all.append(ei[0] + base[s])
        dst_all.append((ei[1] + base[d]) * len(edge_types) + k)  # one CSR row per (target, edge type)
    n, te = int(offsets[-1]), max(1, len(edge_types))
    typed_ptr, col = csr_from_edges(np.concatenate(src_all) if src_all else np.empty(0, np.int64),
                                    np.concatenate(dst_all) if dst_all else np.empty(0, np.int64), n * te)
    rowptr = np.ascontiguousarray(typed_ptr[::te])
    edge_type = np.repeat(np.tile(np.arange(te, dtype=np.int8), n), np.diff(typed_ptr))
    table = np.zeros((n, max(dims, default=0)), dtype=np.float32)
    for i, t in enumerate(node_types):
        if t in x:
            table[offsets[i]:offsets[i + 1], :dims[i]] = np.asarray(x[t], dtype=np.float32)
    labels = np.full(n, -1, dtype=np.int64)
    lo = int(base[target])
    labels[lo:lo + int(counts[target])] = np.asarray(y, dtype=np.int64)
    return GraphData(name=name, rowptr=rowptr, col=col, x=table, y=labels,
                     num_classes=int(num_classes if num_classes is not None else labels.max() + 1),
                     edge_type=edge_type, schema=schema,
                     **{k: np.asarray(splits[k], dtype=np.int64) + lo for k in ("train_idx", "val_idx", "test_idx")})
