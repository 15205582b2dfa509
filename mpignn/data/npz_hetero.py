"""`npz:PATH` for heterogeneous graphs: one .npz whose keys name the types, validated like the homogeneous
format. Keys: docs/tasks.md, "Heterogeneous graphs (npz)". numpy only.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from mpignn.data.graph import GraphData
from mpignn.data.hetero import build_hetero, edge_type_name
from mpignn.data.npyio import refuse_beyond_memory
from mpignn.data.npz_checks import SPLIT_KEYS, Fail, check_finite, check_labels, check_splits, expect_array, failing

__all__ = ["hetero_from_headers", "hetero_npz_arrays"]

_HINT = "see 'Heterogeneous graphs (npz)' in docs/tasks.md for the keys, dtypes and shapes"


def _names(key: str, prefix: str, parts: int, fail: Fail) -> list[str]:
    names = key[len(prefix):].split("__")
    if len(names) != parts or not all(names):
        raise fail(f"key {key} must be {prefix}{'__'.join(['NAME'] * parts)}")
    return names


def hetero_from_headers(path: str, headers: dict[str, tuple[tuple[int, ...], np.dtype]],
                        read: Callable[[list[str]], dict[str, np.ndarray]], name: str) -> GraphData:
    """Validate a heterogeneous npz from its `headers`, read the named keys with `read`, build the graph."""
    fail = failing(path, _HINT)
    counts_keys = [k for k in headers if k.startswith("num_nodes__")]
    if not counts_keys:
        raise fail("no num_nodes__T keys (one node count per node type)")
    y_keys = [k for k in headers if k.startswith("y__")]
    if len(y_keys) != 1:
        raise fail(f"exactly one y__T key (labels of the classified type) is needed; found "
                   f"{', '.join(y_keys) or 'none'}")
    missing = [k for k in SPLIT_KEYS if k not in headers]
    if missing:
        raise fail(f"missing key(s) {', '.join(missing)}")
    scalars = [*counts_keys, *(["num_classes"] if "num_classes" in headers else [])]
    for key in (*scalars, *(k for k in headers if k.startswith(("edge_index__", "y__"))), *SPLIT_KEYS):
        form = "scalar" if key in scalars else "[2, E]" if key.startswith("edge_index__") else "1-D"
        expect_array(fail, key, *headers[key], "int", form)
    for key in (k for k in headers if k.startswith("x__")):
        expect_array(fail, key, *headers[key], "float", "[N, F]")
    arrays = read([k for k in headers if k.startswith(("num_nodes__", "x__", "edge_index__", "y__"))
                   or k in (*SPLIT_KEYS, "num_classes")])
    counts = {_names(k, "num_nodes__", 1, fail)[0]: int(arrays[k].reshape(-1)[0]) for k in counts_keys}
    for t, n in counts.items():
        if n < 1:
            raise fail(f"num_nodes__{t} must be >= 1; got {n}")
    total = sum(counts.values())  # 8 bytes a node at least: a label or an id
    refuse_beyond_memory(path, 8 * total, f"the num_nodes__ counts add up to {total} nodes, more than this "
                                          "host's {memory} GiB of memory holds", "check the counts you saved")
    x = {}
    for key in (k for k in arrays if k.startswith("x__")):
        t = _names(key, "x__", 1, fail)[0]
        if t not in counts or arrays[key].ndim != 2 or arrays[key].shape[0] != counts[t]:
            raise fail(f"{key} must be [num_nodes__{t}, F] for a node type with a num_nodes__ key; got "
                       f"shape {arrays[key].shape}")
        with np.errstate(over="ignore"):
            x[t] = np.ascontiguousarray(arrays[key], dtype=np.float32)
        check_finite(fail, key, x[t])
    edges = {tuple(_names(key, "edge_index__", 3, fail)): arrays[key] for key in arrays
             if key.startswith("edge_index__")}
    target = _names(y_keys[0], "y__", 1, fail)[0]
    if target not in counts:
        raise fail(f"{y_keys[0]} labels a type without a num_nodes__{target} key")
    y = arrays[y_keys[0]].astype(np.int64).reshape(-1)
    if len(y) != counts[target]:
        raise fail(f"{y_keys[0]} must hold num_nodes__{target} = {counts[target]} labels; got {len(y)}")
    splits = {k: arrays[k].astype(np.int64) for k in SPLIT_KEYS}
    check_splits(fail, splits, counts[target])
    num_classes = check_labels(fail, y, splits, counts[target], arrays.get("num_classes"), "num_classes")
    return build_hetero(name, counts, edges, x, target, y, splits, num_classes)


def hetero_npz_arrays(graph: GraphData) -> dict[str, np.ndarray]:
    """Return the arrays of a heterogeneous GraphData in this format (`npz.save_npz` writes them)."""
    schema = graph.schema
    offsets = schema.offsets
    arrays: dict[str, np.ndarray] = {}
    for k, t in enumerate(schema.node_types):
        arrays[f"num_nodes__{t}"] = np.int64(schema.node_counts[k])
        if schema.feature_dims[k]:
            arrays[f"x__{t}"] = graph.x[offsets[k]:offsets[k + 1], :schema.feature_dims[k]]
    src, dst = graph.edge_index()
    for e, et in enumerate(schema.edge_types):
        m = graph.edge_type == e
        s, d = schema.type_index(et[0]), schema.type_index(et[2])
        arrays[f"edge_index__{edge_type_name(et)}"] = np.stack([src[m] - offsets[s], dst[m] - offsets[d]])
    lo = offsets[schema.type_index(schema.target)]
    arrays[f"y__{schema.target}"] = graph.y[lo:lo + schema.node_counts[schema.type_index(schema.target)]]
    for key in SPLIT_KEYS:
        arrays[key] = getattr(graph, key) - lo
    arrays["num_classes"] = np.int64(graph.num_classes)
    return arrays
