"""Model zoo: GraphSAGE, GAT and GCN that compute only the rows each layer needs, each a node encoder a task
puts its head on. All run on mpignn (and PyG NeighborLoader) mini-batches.

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
    """Build `sage`, `gat` or `gcn` (`SampledGNN`), or with a heterogeneous `schema` `sage` or `rgcn` (`HeteroGNN`,
    which take no `norm`, `residual` or `linear_head`); ConfigError for a model or option the graph cannot take."""
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
