"""Model zoo: GraphSAGE and GAT that compute only the rows each layer needs, and PyG's GCN with per-hop
trimming, as node classifiers or as the encoder of a link predictor (`LinkModel`). All run on mpignn (and
PyG NeighborLoader) mini-batches."""
from __future__ import annotations

from typing import Any, Mapping

import torch

from mpignn.choices import MODELS  # there: config reads it without torch
from mpignn.errors import ConfigError
from mpignn.models.hetero import HETERO_MODELS, HeteroGNN
from mpignn.models.link import DECODERS, LinkModel
from mpignn.models.sampled import SampledGNN, encode

__all__ = ["HeteroGNN", "MODELS", "DECODERS", "build_model", "forward_batch", "encode", "SampledGNN", "LinkModel"]


def build_model(name: str, in_channels: int | Mapping[str, int], hidden: int, out_channels: int, num_layers: int,
                dropout: float = 0.0, *, task: str = "node", decoder: str = "dot", schema: Any = None) -> torch.nn.Module:
    """`sage` (GraphSAGE, mean aggregation), `gat` (4 heads) or `gcn` (PyG's GCN): a classifier into
    `out_channels` classes, or with `task="link"` an encoder into `hidden` dimensions under a `decoder`.
    With a heterogeneous `schema` (in_channels per node type): `sage` (a SAGE conv per edge type, summed per
    target type) or `rgcn` (`models.hetero`), node classification of the schema's target type."""
    if schema is not None:
        if name not in HETERO_MODELS or task != "node":
            raise ConfigError(f"a heterogeneous graph trains --model {' or '.join(HETERO_MODELS)} with --task node; "
                              f"got --model {name} --task {task}. HINT: --model sage")
        return HeteroGNN(name, schema, in_channels, hidden, out_channels, num_layers, dropout)
    if name == "rgcn":
        raise ConfigError("--model rgcn needs a heterogeneous graph (edge types). HINT: --model sage")
    width = hidden if task == "link" else out_channels
    if name in ("sage", "gat"):
        encoder: torch.nn.Module = SampledGNN(name, in_channels, hidden, width, num_layers, dropout)
    elif name == "gcn":
        from torch_geometric.nn.models import GCN

        encoder = GCN(in_channels, hidden, num_layers, width, dropout=dropout)
    else:
        raise ConfigError(f"--model must be one of {', '.join(MODELS)}; got '{name}'. HINT: --model sage")
    return LinkModel(encoder, hidden, decoder) if task == "link" else encoder


def forward_batch(model: torch.nn.Module, data) -> torch.Tensor:
    """Logits of the batch's seed nodes, or of its pairs (`edge_label_index`) for a LinkModel."""
    if isinstance(getattr(model, "module", model), HeteroGNN):
        return model(data)
    if isinstance(getattr(model, "module", model), LinkModel):
        return model(data.x, data.edge_index, data.num_sampled_nodes, data.num_sampled_edges,
                     data.edge_label_index, getattr(data, "in_degree", None))
    return encode(model, data.x, data.edge_index, data.num_sampled_nodes, data.num_sampled_edges,
                  getattr(data, "in_degree", None))
