"""Model zoo: GraphSAGE, GAT and GCN that compute only the rows each layer needs (GCN: PyG's GCN with per-hop
trimming, the same numbers), each a node encoder a task puts its head on (`tasks`: the classes, or a pair decoder,
`models.link.LinkModel`). All run on mpignn (and PyG NeighborLoader) mini-batches.

Layer 9 (models): imports loader and the layers below; never inference, tasks or anything above.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from mpignn.config.choices import MODELS  # there: config reads it without torch
from mpignn.config.refusals import check_combinations
from mpignn.errors import ConfigError
from mpignn.models.hetero import HETERO_MODELS, HeteroGNN
from mpignn.models.sampled import SampledGNN, encode

__all__ = ["HeteroGNN", "MODELS", "build_model", "forward_batch", "encode", "SampledGNN"]


def build_model(name: str, in_channels: int | Mapping[str, int], hidden: int, out_channels: int, num_layers: int,
                dropout: float = 0.0, *, schema: Any = None, norm: str = "none",
                residual: bool = False, linear_head: bool = False) -> torch.nn.Module:
    """`sage` (GraphSAGE, mean aggregation), `gat` (4 heads) or `gcn` (PyG's GCNConv): `out_channels` numbers per
    seed node (a classifier's classes, or an encoder's embedding), with `norm` ("none", "layer", "batch") after
    each hidden layer, a `residual` branch on every layer and, with `linear_head`, hidden-wide convs and a linear
    layer to `out_channels` (`SampledGNN`).
    With a heterogeneous `schema` (in_channels per node type): `sage` (a SAGE conv per edge type, summed per
    target type) or `rgcn` (`models.hetero`), on the schema's target type; they take none of the three.

    Raises:
        ConfigError: a model the graph cannot take, or norm, residual or head on one without them
            (`config.refusals`).
    """
    check_combinations({"model": name, "norm": norm, "residual": residual, "linear_head": linear_head,
                        "hetero": schema is not None})
    if schema is not None:
        if name not in HETERO_MODELS:
            raise ConfigError(f"a heterogeneous graph trains --model {' or '.join(HETERO_MODELS)}; "
                              f"got --model {name}. HINT: --model sage")
        return HeteroGNN(name, schema, in_channels, hidden, out_channels, num_layers, dropout)
    if name == "rgcn":
        raise ConfigError("--model rgcn needs a heterogeneous graph (edge types). HINT: --model sage")
    if name in ("sage", "gat", "gcn"):
        return SampledGNN(name, in_channels, hidden, out_channels, num_layers, dropout, norm=norm, residual=residual,
                          linear_head=linear_head)
    raise ConfigError(f"--model must be one of {', '.join(MODELS)}; got '{name}'. HINT: --model sage")


def forward_batch(model: torch.nn.Module, data) -> torch.Tensor:
    """The outputs of the batch's seed nodes (seeds of the target type on a heterogeneous batch)."""
    if isinstance(getattr(model, "module", model), HeteroGNN):
        return model(data)
    return encode(model, data.x, data.edge_index, data.num_sampled_nodes, data.num_sampled_edges,
                  getattr(data, "in_degree", None), getattr(data, "halo", None), getattr(data, "whole", None),
                  getattr(data, "mean_over", None), getattr(data, "edge_weight", None))
