"""A hidden layer's activation and the next layer's halo as one autograd node, for cooperative batches.

The ReLU (and dropout) writes own rows straight into a table whose tail receives the remote rows, sparing
`Halo`'s `torch.cat` of every own row of every layer (its cost: docs/training.md, "Fewer copies").
"""
from __future__ import annotations

from typing import Any

import torch

from mpignn.exchange.halo import return_grads, send_own
from mpignn.models.dropout import activate_into, activation_grad

__all__ = ["activated_halo"]


class _ActivatedHalo(torch.autograd.Function):
    """pre-activation own rows [n_own, ...] -> the layer's table: activated own rows, then other ranks' rows."""

    @staticmethod
    def forward(ctx, x, p, training, plan, transport, counter):
        n_own = len(x)
        table = torch.empty((n_own + int(plan.recv_counts.sum()),) + tuple(x.shape[1:]), dtype=x.dtype,
                            device=x.device)
        ctx.scale = activate_into(x.contiguous(), table[:n_own], p, training)
        got, ctx.send_idx = send_own(table[:n_own], plan, transport, counter)
        table[n_own:] = got
        ctx.save_for_backward(table)
        ctx.plan, ctx.transport, ctx.counter = plan, transport, counter
        return table

    @staticmethod
    def backward(ctx, grad):
        (table,) = ctx.saved_tensors
        grad_own = return_grads(grad, ctx.plan, ctx.transport, ctx.counter, ctx.send_idx)
        grad_in = activation_grad(table[:ctx.plan.n_own], grad_own, ctx.scale, inplace=True)
        return grad_in, None, None, None, None, None


def activated_halo(halo: Any, layer: int, x: torch.Tensor, p: float, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """`halo(layer, relu_dropout(x, p, training))` without copying the activated rows into the table."""
    table = _ActivatedHalo.apply(x, p, training, halo.plan(layer, len(x)), halo.transport, halo.counter)
    return table, halo.sources(layer, x.device)
