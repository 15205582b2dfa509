"""`inference(model, graph)`: every node's output of a trained model, exact (whole neighbourhoods, layer by
layer), each rank its own nodes: the public entry to `inference.layerwise`, which walks PyG's basic GNNs, a
`.convs` module like PyG's examples' and mpignn's own models.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from mpignn.errors import ConfigError, mark_agreed
from mpignn.inference.layers import unwrap
from mpignn.inference.layerwise import exact_outputs
from mpignn.loader.local_graph import LocalGraph
from mpignn.models.link import LinkModel

__all__ = ["inference"]


def inference(model: torch.nn.Module, graph: LocalGraph, *, batch_size: int = 8192,
              act: str | Callable[[torch.Tensor], torch.Tensor] | None = None, device: Any = None,
              halo_mib: float = 256) -> torch.Tensor:
    """Collective over `graph.runtime.comm`: every rank must call it, in the same order. Every node's output,
    layer by layer over whole in-neighbourhoods, each rank its own nodes (the models it walks: docs/api.md).
    Eval mode while it runs; the model's mode is restored after.

    Args:
        model: the trained model, on any device (a DistributedDataParallel wrapper is fine).
        graph: this rank's part (`load_local_graph`); its rows are the features, then any learnable rows.
        batch_size: target nodes per block: a block holds them, all their in-neighbours' rows and one layer's
            output (PyG's subgraph loader's `batch_size`).
        act: the activation between the convs of a plain `.convs` module: a name PyG resolves ("relu",
            "elu", ...) or a callable; default ReLU. The other models carry their own (give none).
        device: where the layers run (default: the model's parameters', else the graph's runtime device).
        halo_mib: other ranks' rows held at once; consecutive blocks' are fetched together up to this.

    Returns:
        float tensor [number of this rank's own nodes, out_channels] on CPU: row i is node `graph.node_id[i]`
        (the dataset's id). On a heterogeneous graph only the types the model outputs have rows (others zeros).

    Raises:
        ConfigError: on every rank alike: a model or configuration inference cannot walk exactly (no `.convs`,
            a conv it does not know, `jk` other than None/"last", norms over a batch's nodes, a user's model
            on a heterogeneous graph, a width the graph does not give) or a bad argument.
    """
    rt = graph.runtime
    try:  # the same arguments on every rank: agreed without a collective
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
    except ConfigError as exc:
        raise mark_agreed(exc) from None
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
