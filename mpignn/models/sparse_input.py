"""SAGE's first layer on sparse input rows (a full-graph batch's bag-of-words features): project first, then
average hidden-wide rows; each owner multiplies its own rows. Why: docs/training.md, "Full-graph training".
"""
from __future__ import annotations

from typing import Any

import torch

from mpignn.models.aggregate import MeanAdjacency

__all__ = ["column_major", "sage_sparse_input", "sparse_projection"]

# The weight gradients' products gather rows of a [sources x width] matrix at random, sources (all the rows of a
# rank) being too many for the cache; a block of its columns this large stays in cache while every bag reads it.
GATHER_BLOCK_BYTES = 4 << 20


def column_major(linear: torch.nn.Module) -> None:
    """Store `linear`'s weight column-major, so sparse products and gradients need no transposing copy
    (docs/training.md, "Column-major weights")."""
    linear.weight.data = linear.weight.data.t().contiguous().t()


def sage_sparse_input(conv: torch.nn.Module, sources: tuple, targets: tuple, halo: Any,
                      adj: MeanAdjacency) -> torch.Tensor:
    """SAGEConv on sparse input rows (`WholeNeighbourhoods.sparse_rows` of its sources, own only with a `halo`,
    and targets); `adj` the layer's mean over the sources."""
    projected = sparse_projection(conv.lin_l.weight, sources)
    if halo is not None:  # the halo rows' products from their owners
        projected = halo(0, projected)[0]
    return _Mean.apply(projected, adj) + sparse_projection(conv.lin_r.weight, targets) + conv.lin_l.bias.float()


def sparse_projection(weight: torch.Tensor, rows: tuple) -> torch.Tensor:
    """Sparse rows (rows, transposed rows) times `weight`^T, without bias."""
    return _SparseProjection.apply(weight, *rows)


class _SparseProjection(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, rows, rows_t):
        ctx.rows_t, ctx.dtype = rows_t, weight.dtype
        return _sparse_product(rows, weight.float().t().contiguous())  # a view where `weight` is column-major

    @staticmethod
    def backward(ctx, grad):
        return _sparse_product_blocked(ctx.rows_t, grad.float().contiguous()).t().to(ctx.dtype), None, None


class _Mean(torch.autograd.Function):
    """adj.mean of rows needing a gradient, outside autocast (the products are float32)."""

    @staticmethod
    def forward(ctx, rows, adj):
        ctx.adj = adj
        with torch.autocast(rows.device.type, enabled=False):
            return adj.mean(rows)

    @staticmethod
    def backward(ctx, grad):
        with torch.autocast(grad.device.type, enabled=False):
            return ctx.adj.mean_t(grad.float()), None


def _sparse_product(rows: tuple[torch.Tensor, ...], dense: torch.Tensor) -> torch.Tensor:
    cols, starts, values = rows
    return torch.nn.functional.embedding_bag(cols, dense, starts, mode="sum", per_sample_weights=values)


def _sparse_product_blocked(rows: tuple[torch.Tensor, ...], dense: torch.Tensor) -> torch.Tensor:
    """`_sparse_product` a block of columns at a time, the same result (docs/training.md, "Blocked gathers")."""
    width = dense.shape[1]
    block = 1 << max(4, (GATHER_BLOCK_BYTES // max(1, dense.shape[0] * dense.element_size())).bit_length() - 1)
    if block >= width:
        return _sparse_product(rows, dense)
    return torch.cat([_sparse_product(rows, dense[:, i:i + block].contiguous()) for i in range(0, width, block)], 1)
