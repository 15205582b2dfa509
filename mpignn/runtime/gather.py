"""`gather_nodes`: every rank's per-node rows on rank 0, in the dataset's order, for one-process consumers.
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
    """Collective over `rt.comm`: join each rank's own-node rows (as `inference` returns them) on rank 0.

    Args:
        values: a tensor or array of one row per own node, of one dtype and row shape on every rank.
    Returns:
        On rank 0 row k is dataset node k (a CPU tensor where `values` is one, else an array); None elsewhere.
    Raises:
        ConfigError: on every rank: a wrong row count on some rank, or differing row shapes or dtypes.
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
