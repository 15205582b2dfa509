"""`inference(model, graph)`: the public entry to exact layer-wise inference (`inference.layerwise`).
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
