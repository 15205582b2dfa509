"""Heterogeneous GraphSAGE (PyG's `HeteroConv` of SAGEConvs, summed) and R-GCN (mean normalisation) over
`HeteroData` batches, trimmed per hop like `SampledGNN`.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.nn.functional as F

from mpignn.config.choices import HETERO_MODELS  # there: config reads it without torch
from mpignn.data.hetero import edge_type_name

__all__ = ["HeteroGNN", "HETERO_MODELS"]


class HeteroGNN(torch.nn.Module):
    """`kind` "sage" or "rgcn" on a graph with `schema`; `in_channels`: input width of each node type."""

    def __init__(self, kind: str, schema: Any, in_channels: Mapping[str, int], hidden: int, out_channels: int,
                 num_layers: int, dropout: float = 0.0) -> None:
        super().__init__()
        from torch_geometric.nn import SAGEConv

        if kind not in HETERO_MODELS:
            raise ValueError(f"unknown heterogeneous model {kind}")
        self.kind, self.dropout, self.num_layers = kind, dropout, num_layers
        self.node_types = tuple(schema.node_types)  # the schema's order: type indices of the id blocks
        self.edge_types = [tuple(e) for e in schema.edge_types]
        self.target = schema.target
        # Only the convs of types a later layer reads exist: DDP wants every parameter used.
        need = [{self.target}]
        for _ in range(num_layers - 1):
            need.insert(0, need[0] | {s for s, _, d in self.edge_types if d in need[0]})
        self.convs = torch.nn.ModuleList()
        self.roots = torch.nn.ModuleList()
        for layer in range(num_layers):
            width = out_channels if layer == num_layers - 1 else hidden
            c_in = {t: (in_channels[t] if layer == 0 else hidden) for t in schema.node_types}
            sage = kind == "sage"
            self.convs.append(torch.nn.ModuleDict({
                edge_type_name(et): SAGEConv((c_in[et[0]], c_in[et[2]]), width, root_weight=sage, bias=sage)
                for et in self.edge_types if et[2] in need[layer]}))
            self.roots.append(torch.nn.ModuleDict(
                {} if sage else {t: torch.nn.Linear(c_in[t], width) for t in sorted(need[layer])}))

    def forward(self, data: Any) -> torch.Tensor:
        """Logits of the batch's seeds (the target type's first `batch_size` nodes)."""
        x = dict(data.x_dict)
        nodes = data.num_sampled_nodes_dict
        edges = data.num_sampled_edges_dict
        edge_index = data.edge_index_dict
        hops = len(next(iter(edges.values())))
        if hops != self.num_layers:
            raise ValueError(f"batch sampled {hops} hops for a {self.num_layers}-layer model")
        for layer in range(self.num_layers):
            keep = hops - layer  # hops still needed as targets after this layer
            n_dst = {t: int(sum(c[:keep])) for t, c in nodes.items()}
            out: dict[str, torch.Tensor] = {t: root(x[t][:n_dst[t]]) for t, root in self.roots[layer].items()}
            for et in self.edge_types:
                src, _, dst = et
                if edge_type_name(et) not in self.convs[layer] or src not in x:  # not needed, or no input (no in-edges)
                    continue
                n_e = int(sum(edges[et][:keep]))
                y = self.convs[layer][edge_type_name(et)]((x[src], x[dst][:n_dst[dst]]), edge_index[et][:, :n_e],
                                                size=(x[src].size(0), n_dst[dst]))
                out[dst] = out[dst] + y if dst in out else y
            if layer < self.num_layers - 1:
                out = {t: F.dropout(F.relu(h), p=self.dropout, training=self.training) for t, h in out.items()}
            x = out
        return x[self.target][:int(data.batch_size)]
