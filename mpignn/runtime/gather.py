"""`gather_nodes`: per-node rows of every rank (predictions, embeddings) on rank 0, in the dataset's node order,
for what runs in one process (sklearn, a file writer, a plot). One collective call.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mpignn.errors import ConfigError
from mpignn.launch.bootstrap import Runtime
from mpignn.loader.local_graph import LocalGraph
from mpignn.mpi import check_all, check_same

__all__ = ["gather_nodes"]


def gather_nodes(rt: Runtime, graph: LocalGraph, values: Any) -> Any:
    """Collective over `rt.comm`: this rank's rows of its own nodes (row i is node `graph.node_id[i]`, as
    `inference` returns them) joined on rank 0, row k being dataset node k.

    Args:
        rt: the runtime `graph` was loaded on.
        graph: this rank's part.
        values: a tensor or array of one row per own node, of one dtype and row shape on every rank.

    Returns:
        On rank 0 every node's row (a tensor on the CPU where `values` is a tensor, else an array); None on the
        other ranks.

    Raises:
        ConfigError: on every rank, where some rank's `values` has not one row per own node, or the ranks' row
            shapes or dtypes differ.
    """
    tensor = isinstance(values, torch.Tensor)
    rows = values.detach().cpu().numpy() if tensor else np.asarray(values)
    ids = np.asarray(graph.node_id, dtype=np.int64)
    problem = "" if rows.ndim >= 1 and len(rows) == len(ids) else (
        f"gather_nodes expected one row per own node ({len(ids)} on rank {rt.rank}); got shape "
        f"{tuple(rows.shape)}. HINT: pass what inference(model, graph) returned on this rank")
    check_all(rt.comm, not problem, problem, ConfigError)
    check_same(rt.comm, {"row shape": list(rows.shape[1:]), "dtype": str(rows.dtype)}, "gather_nodes rows",
               "give every rank rows of one shape and dtype", ConfigError)
    if graph.replicated:  # every rank holds every node already
        parts = [(ids, rows)] if rt.rank == 0 else None
    else:
        parts = rt.comm.gather((ids, rows), root=0)
    if rt.rank != 0:
        return None
    all_ids = np.concatenate([p[0] for p in parts])
    out = np.empty((len(all_ids), *rows.shape[1:]), dtype=rows.dtype)
    out[all_ids] = np.concatenate([p[1] for p in parts])
    return torch.from_numpy(out) if tensor else out
