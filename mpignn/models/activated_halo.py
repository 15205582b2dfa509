"""A hidden layer's activation and the next layer's halo as one autograd node, for cooperative batches.

`Halo` builds each layer's table as `torch.cat([own rows, rows from other ranks])`, a copy of every own row
of every layer (about 45 ms a step on sbm200k, the largest cost cooperative ranks pay that independent ones
do not). Here the ReLU (and dropout) writes the own rows straight into a table with room for the remote rows,
which then arrive in its tail: nothing is copied but the rows that travel. Backward: the remote rows'
gradients go back to their owners and are added into the own rows', then through the activation.
"""
from __future__ import annotations

from typing import Any

import torch

from mpignn.exchange.halo import move_rows
from mpignn.models.dropout import activate_into, activation_grad

__all__ = ["activated_halo"]


class _ActivatedHalo(torch.autograd.Function):
    """pre-activation own rows [n_own, ...] -> the layer's table: activated own rows, then other ranks' rows."""

    @staticmethod
    def forward(ctx, x, p, training, plan, transport, counter):
        n_own, n_recv = len(x), int(plan.recv_counts.sum())
        table = torch.empty((n_own + n_recv,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
        own = table[:n_own]
        ctx.scale = activate_into(x.contiguous(), own, p, training)
        send_idx = torch.from_numpy(plan.send_idx).to(x.device)
        got = move_rows(transport, own[send_idx], plan.send_counts, plan.recv_counts)
        counter.add(got)
        table[n_own:] = got
        ctx.save_for_backward(table)
        ctx.plan, ctx.transport, ctx.counter, ctx.send_idx = plan, transport, counter, send_idx
        return table

    @staticmethod
    def backward(ctx, grad):
        (table,) = ctx.saved_tensors
        plan, n_own = ctx.plan, ctx.plan.n_own
        back = move_rows(ctx.transport, grad[n_own:].contiguous(), plan.recv_counts, plan.send_counts)
        ctx.counter.add(back)
        grad_own = grad[:n_own] if grad.is_contiguous() else grad[:n_own].contiguous()
        grad_own.index_add_(0, ctx.send_idx, back.to(grad.dtype))  # this node's gradient alone: in place
        return activation_grad(table[:n_own], grad_own, ctx.scale, inplace=True), None, None, None, None, None


def activated_halo(halo: Any, layer: int, x: torch.Tensor, p: float, training: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """`halo(layer, relu_dropout(x, p, training))` without copying the activated rows into the table:
    (the layer's table, each edge's source row in it)."""
    table = _ActivatedHalo.apply(x, p, training, halo.plan(layer, len(x)), halo.transport, halo.counter)
    return table, halo.sources(layer, x.device)
