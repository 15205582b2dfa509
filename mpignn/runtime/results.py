"""What a loop computes over all ranks: exact layer-wise `inference`, `gather_nodes` on rank 0, and the metrics
`accuracy` and `mean`. The metrics sum numerators and counts and divide once: averaging averages weighs a rank
with 10 seeds like one with 1,000.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from mpignn.errors import ConfigError, agreed
from mpignn.inference.layers import unwrap
from mpignn.inference.layerwise import exact_outputs
from mpignn.launch.bootstrap import Runtime
from mpignn.loader.local_graph import LocalGraph
from mpignn.models.link import LinkModel
from mpignn.mpi import allreduce_sum, check_all, check_same
from mpignn.runtime.loader_base import as_array

__all__ = ["inference", "gather_nodes", "accuracy", "mean"]


def inference(model: torch.nn.Module, graph: LocalGraph, *, batch_size: int = 8192,
              act: str | Callable[[torch.Tensor], torch.Tensor] | None = None, device: Any = None,
              halo_mib: float = 256) -> torch.Tensor:
    """Collective over `graph.runtime.comm`: every rank must call it, in the same order. Return every own
    node's output, layer by layer over whole in-neighbourhoods (the models it walks: docs/api.md).

    Args:
        model: the trained model, on any device (DDP is fine); put in eval mode meanwhile.
        graph: this rank's part (`load_local_graph`).
        batch_size: target nodes per block (PyG's subgraph loader's `batch_size`).
        act: the activation between a plain `.convs` module's convs (a PyG name or a callable; default ReLU).
        device: where the layers run (default: the model's parameters', else the runtime's).
        halo_mib: other ranks' rows held at once.
    Returns:
        float tensor [own nodes, out_channels] on CPU; row i is node `graph.node_id[i]` (zeros for the types a
        heterogeneous model does not output).
    Raises:
        ConfigError: on every rank alike: a model inference cannot walk exactly, or a bad argument.
    """
    rt = graph.runtime
    with agreed(ConfigError):  # the same arguments on every rank: agreed without a collective
        if rt is None:
            raise ConfigError("inference expects a graph that knows its runtime; got one without (graph.runtime "
                              "is None). HINT: load it with mpignn.runtime.load_local_graph(rt, ...)")
        if not isinstance(model, torch.nn.Module):
            raise ConfigError(f"inference expects a torch.nn.Module with .convs; got {type(model).__name__}. "
                              "HINT: pass the model itself, e.g. inference(model, graph)")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size expects a positive int (target nodes per block); got {batch_size!r}. "
                              "HINT: batch_size=8192")
        if not halo_mib >= 0:
            raise ConfigError(f"halo_mib expects MiB >= 0; got {halo_mib!r}. HINT: halo_mib=256")
    inner = unwrap(model)
    encoder = inner.encoder if isinstance(inner, LinkModel) else inner  # a link model's nodes: its embeddings
    if device is None:
        device = next((p.device for p in encoder.parameters()), rt.device)
    training = model.training
    try:
        rows, _, _ = exact_outputs(rt, graph, encoder, chunk=batch_size, act=act, device=device, halo_mib=halo_mib)
    finally:
        model.train(training)
    return torch.from_numpy(rows)


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
    rows = as_array(values)
    ids = np.asarray(graph.node_id, dtype=np.int64)
    problem = "" if rows.ndim >= 1 and len(rows) == len(ids) else (
        f"gather_nodes expected one row per own node ({len(ids)} on rank {rt.rank}); got shape "
        f"{tuple(rows.shape)}. HINT: pass what inference(model, graph) returned on this rank")
    check_all(rt.comm, not problem, problem, ConfigError)
    check_same(rt.comm, {"row shape": list(rows.shape[1:]), "dtype": str(rows.dtype)}, "gather_nodes rows",
               "give every rank rows of one shape and dtype", ConfigError)
    # a replicated graph: every rank holds every node already
    parts = [(ids, rows)] if graph.replicated else rt.comm.gather((ids, rows), root=0)
    if rt.rank != 0:
        return None
    all_ids = np.concatenate([p[0] for p in parts])
    out = np.empty((len(all_ids), *rows.shape[1:]), dtype=rows.dtype)
    out[all_ids] = np.concatenate([p[1] for p in parts])
    return torch.from_numpy(out) if tensor else out


def accuracy(rt: Runtime, pred: Any, target: Any) -> float:
    """Collective over `rt.comm`: return the share of items on all ranks where `pred` equals `target` (NaN: none)."""
    pred, target = as_array(pred), as_array(target)
    if pred.shape != target.shape:
        raise ConfigError(f"accuracy takes predictions and labels of one shape; got {pred.shape} and {target.shape}. "
                          "HINT: accuracy(rt, logits.argmax(-1), y)")
    return mean(rt, float((pred == target).sum()), pred.size)


def mean(rt: Runtime, total: Any, count: Any) -> float:
    """Collective over `rt.comm`: return the sum of `total` over ranks / the sum of `count` (NaN: none)."""
    total, count = float(as_array(total).sum()), float(as_array(count).sum())
    if count < 0:
        raise ConfigError(f"mean takes a count of items, not {count}. HINT: mean(rt, loss_sum, n)")
    summed, counted = allreduce_sum(rt.comm, [total, count]).tolist()
    return summed / counted if counted else float("nan")

