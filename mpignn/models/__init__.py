"""Model zoo: GraphSAGE and GAT that compute only the rows each layer needs, and PyG's GCN with per-hop
trimming. All run on mpignn (and PyG NeighborLoader) mini-batches."""
from __future__ import annotations

import torch

from mpignn.errors import ConfigError
from mpignn.models.sampled import SampledGNN

__all__ = ["MODELS", "build_model", "forward_batch", "SampledGNN"]

MODELS = ("sage", "gcn", "gat")


def build_model(name: str, in_channels: int, hidden: int, out_channels: int, num_layers: int,
                dropout: float = 0.0) -> torch.nn.Module:
    """`sage` (GraphSAGE, mean aggregation), `gat` (4 heads) or `gcn` (PyG's GCN)."""
    if name in ("sage", "gat"):
        return SampledGNN(name, in_channels, hidden, out_channels, num_layers, dropout)
    if name == "gcn":
        from torch_geometric.nn.models import GCN

        return GCN(in_channels, hidden, num_layers, out_channels, dropout=dropout)
    raise ConfigError(f"--model must be one of {', '.join(MODELS)}; got '{name}'. HINT: --model sage")


def forward_batch(model: torch.nn.Module, data) -> torch.Tensor:
    """Logits of the batch's seed nodes, computing only what each layer needs."""
    module = getattr(model, "module", model)
    if isinstance(module, SampledGNN):
        return model(data.x, data.edge_index, data.num_sampled_nodes, data.num_sampled_edges)
    out = model(data.x, data.edge_index, num_sampled_nodes_per_hop=data.num_sampled_nodes,
                num_sampled_edges_per_hop=data.num_sampled_edges)
    return out[:data.batch_size]
