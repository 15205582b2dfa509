"""Link prediction head: a node encoder (any mpignn model) and a decoder (dot product, or an MLP over the
element-wise product) that scores node pairs as logits for binary cross-entropy.
"""
from __future__ import annotations

from typing import Sequence

import torch

from mpignn.config.choices import DECODERS  # there: config reads it without torch
from mpignn.models.sampled import encode

__all__ = ["LinkModel", "DECODERS"]


class LinkModel(torch.nn.Module):
    """encoder(x, edge_index, hops...) -> seed embeddings -> decoder(pairs) -> one logit per pair."""

    def __init__(self, encoder: torch.nn.Module, hidden: int, decoder: str = "dot") -> None:
        super().__init__()
        if decoder not in DECODERS:
            raise ValueError(f"unknown decoder {decoder}")
        self.encoder = encoder
        self.mlp = (torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                        torch.nn.Linear(hidden, 1)) if decoder == "mlp" else None)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, num_sampled_nodes: Sequence[int],
                num_sampled_edges: Sequence[int], edge_label_index: torch.Tensor,
                in_degree: torch.Tensor | None = None, mean_over: torch.Tensor | None = None,
                edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        """`mean_over`, `edge_weight`: a layer-neighbour batch's, keeping the encoder's mean unbiased."""
        z = encode(self.encoder, x, edge_index, num_sampled_nodes, num_sampled_edges, in_degree,
                   mean_over=mean_over, edge_weight=edge_weight)
        return self.decode(z[edge_label_index[0]], z[edge_label_index[1]])

    def decode(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """One logit per pair from the embeddings of its ends (`a`, `b`: [P, hidden])."""
        if self.mlp is None:
            return (a * b).sum(-1)
        return self.mlp(a * b).squeeze(-1)
