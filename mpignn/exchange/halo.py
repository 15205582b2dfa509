"""Rows of a cooperative batch's layers across ranks: forward, remote sources' rows come from their owners;
backward, their gradients go back and are summed into the owners' rows. One autograd node per layer,
collective over the transport's communicator.
"""
from __future__ import annotations

from typing import Any

import torch

from mpignn.exchange.features import device_index
from mpignn.sampling.cooperative import KeptInputs, LayerPlan

__all__ = ["Halo", "return_grads", "send_own"]


def send_own(own: torch.Tensor, plan: LayerPlan, transport: Any, counter: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Collective, forward: (the rows other ranks send this one, which own rows went out: for `return_grads`)."""
    send_idx = torch.from_numpy(plan.send_idx).to(own.device)
    got = transport.rows(own[send_idx], plan.send_counts, plan.recv_counts, plan.pieces)  # pieces: agreed already
    counter.halo_bytes += got.nbytes
    return got, send_idx


def return_grads(grad: torch.Tensor, plan: LayerPlan, transport: Any, counter: Any,
                 send_idx: torch.Tensor) -> torch.Tensor:
    """Collective, backward: the table's gradient -> its own rows', the returned gradients of sent rows added
    in place (the table's gradient is this node's alone, so no copy)."""
    back = transport.rows(grad[plan.n_own:], plan.recv_counts, plan.send_counts, plan.pieces)
    counter.halo_bytes += back.nbytes
    return grad[:plan.n_own].contiguous().index_add_(0, send_idx, back.to(grad.dtype))


class _HaloRows(torch.autograd.Function):
    """own rows [n_own, ...] -> the layer's table: own rows, then the rows other ranks send."""

    @staticmethod
    def forward(ctx, own, plan, transport, counter):
        got, ctx.send_idx = send_own(own, plan, transport, counter)
        ctx.plan, ctx.transport, ctx.counter = plan, transport, counter
        return torch.cat([own, got.to(own.dtype)])

    @staticmethod
    def backward(ctx, grad):
        return return_grads(grad, ctx.plan, ctx.transport, ctx.counter, ctx.send_idx), None, None, None


class Halo:
    """A cooperative batch's layer plans and transport; `SampledGNN` calls `table, src = halo(layer, own_rows)`.

    `counter` (the sampler): its `halo_bytes` adds up the bytes exchanged. `static_input` (full-graph training,
    the same batch every step): the input's remote rows cross once.
    `keeper` (the sampler, `KeptInputs`): input rows an earlier batch brought are copied, not sent."""

    def __init__(self, plans: list[LayerPlan], transport: Any, counter: Any, static_input: bool = False,
                 keeper: Any = None) -> None:
        self.plans, self.transport, self.counter, self.keeper = plans, transport, counter, keeper
        self.static_input, self._filled = static_input, None  # the input table filled in place, if any

    def __call__(self, layer: int, own: torch.Tensor, raw: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """`own`: the layer's own rows, or (no gradient) a whole `table_rows(layer)` table whose tail is filled
        in place. `raw`: features as read, the same in every batch, so a recent batch's rows may stand in."""
        plan = self.plans[layer]
        kept = plan.kept if raw and self.keeper is not None and not own.requires_grad else None
        if plan.kept is not None and kept is None:  # rows of this batch only (GCN's scaled ones): keep no chain
            plan.kept.recent = None
        # a whole table (on a rank that receives no rows: its own rows alone), so what is skipped is agreed
        if len(own) == self.table_rows(layer) and not own.requires_grad:
            if not (self.static_input and layer == 0 and self._filled is own):
                with torch.no_grad():
                    if kept is not None:
                        self._fill_kept(own, plan.n_own, kept)
                    else:
                        own[plan.n_own:] = send_own(own, plan, self.transport, self.counter)[0]
                if layer == 0:
                    self._filled = own
            return own, self.sources(layer, own.device)
        if kept is not None:  # rows without room for the remote ones: a table made here
            self.plan(layer, len(own))
            table = own.new_empty((self.table_rows(layer),) + tuple(own.shape[1:]))
            table[:plan.n_own] = own
            self._fill_kept(table, plan.n_own, kept)
            return table, self.sources(layer, own.device)
        table = _HaloRows.apply(own, self.plan(layer, len(own)), self.transport, self.counter)
        return table, self.sources(layer, own.device)

    def _fill_kept(self, table: torch.Tensor, n_own: int, kept: KeptInputs) -> None:
        """Collective: fill the input table's remote rows from `kept.recent` and the owners; keep them."""
        tail = table[n_own:]
        got = send_own(table[:n_own], kept, self.transport, self.counter)[0]
        if len(kept.fresh):  # (ids through pinned memory: no host sync on an accelerator)
            tail.index_copy_(0, device_index(kept.fresh, table.device), got.to(table.dtype))
        if len(kept.kept):
            recent = kept.recent.rows
            if recent is None:
                raise RuntimeError("cooperative batch: the batch drawn before it never filled its input rows")
            rows = recent.index_select(0, device_index(kept.slots, recent.device))
            tail.index_copy_(0, device_index(kept.kept, table.device), rows.to(table.device, table.dtype))
        kept.recent, kept.rows = None, tail  # a view: its batch's table lives until a later batch is filled
        self.keeper.input_rows += len(tail)
        self.keeper.kept_rows += len(kept.kept)
        self.keeper.filled_inputs = kept

    def table_rows(self, layer: int) -> int:
        """Rows of layer `layer`'s table: its own rows, then those other ranks send."""
        plan = self.plans[layer]
        return plan.n_own + int(plan.recv_counts.sum())

    def plan(self, layer: int, n_own: int) -> LayerPlan:
        """Layer `layer`'s plan, checked against the own rows it is given."""
        plan = self.plans[layer]
        if n_own != plan.n_own:
            raise ValueError(f"layer {layer} got {n_own} own rows; its plan has {plan.n_own}")
        return plan

    def sources(self, layer: int, device: torch.device) -> torch.Tensor:
        """Each edge's source as a row of layer `layer`'s table."""
        return torch.from_numpy(self.plans[layer].src).to(device, non_blocking=True)
