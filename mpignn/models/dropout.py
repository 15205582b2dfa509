"""ReLU then dropout as one in-place autograd node (`SampledGNN`'s activation): `F.dropout`'s CPU mask is slow
(docs/training.md). CPU fp32/fp64 takes one numba pass, its mask fixed by a seed whatever the thread count and
not kept (backward uses out > 0), other devices torch ops; `activated_halo` writes own rows straight into the
cooperative halo's table, sparing `Halo`'s `torch.cat`."""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from numba import njit, prange

from mpignn.compiled import ensure_numba_cache_dir
from mpignn.exchange.halo import return_grads, send_own
from mpignn.sampling.kernels import splitmix

ensure_numba_cache_dir(os.path.dirname(os.path.abspath(__file__)))  # before the first @njit(cache=True) below

__all__ = ["activate_into", "activation_grad", "keep_threshold", "relu_dropout", "activated_halo", "warm_up"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_LOW32 = np.uint64(0xFFFFFFFF)
_CHUNK = 4096


def keep_threshold(p: float) -> int:
    """The 32-bit threshold t of drop rate `p` in [0, 1): keep probability t / 2**32, within 2**-33 of 1-p."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1); got {p}. HINT: use e.g. --dropout 0.5")
    return min(2**32, round((1.0 - p) * 2**32))


# Parallel even where numba runs one thread (not `compiled.serial_or_parallel`): compiled serially, these kernels
# made the default epoch's compute slower (docs/training.md, "The quick start's first run").
@njit(cache=True, parallel=True, nogil=True)
def _forward_kernel(src, dst, seed, threshold, scale):
    """dst[i] = src[i] * scale where src[i] > 0 and draw i is kept, else 0; chunks so the inner loop vectorises."""
    n = src.shape[0]
    seed = np.uint64(seed)
    threshold = np.uint64(threshold)
    zero = src.dtype.type(0)
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        for i in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            v = src[i]
            # draw i of SplitMix64's stream started at `seed` (Steele et al. 2014): 64 uniform bits
            dst[i] = v * scale if v > zero and (splitmix(seed + np.uint64(i) * _GOLDEN) & _LOW32) < threshold else zero


@njit(cache=True, parallel=True, nogil=True)
def _backward_kernel(out, grad, grad_in, scale):
    zero = grad.dtype.type(0)
    for i in prange(out.shape[0]):
        grad_in[i] = grad[i] * scale if out[i] > zero else zero


def warm_up() -> None:
    """Compile (or load from cache) the fp32 kernels as training calls them, where one rank per host can
    (`runtime.graph`): left to the first step, every rank of a host would compile them and write numba's cache."""
    x = np.ones(1, dtype=np.float32)
    _forward_kernel(x, np.empty_like(x), 0, keep_threshold(0.5), np.float32(2.0))
    _backward_kernel(x, x, np.empty_like(x), np.float32(2.0))


def _numba_ok(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and x.is_contiguous()


def activate_into(x: torch.Tensor, out: torch.Tensor, p: float, training: bool) -> float:
    """relu(x), with dropout in training when p > 0, written into `out` (may be `x`; no autograd). Returns the
    scale `activation_grad` needs (1.0 without dropout)."""
    if not training or p == 0.0:
        torch.clamp(x, min=0, out=out)
        return 1.0
    threshold = keep_threshold(p)
    scale = 2.0**32 / threshold
    if _numba_ok(x) and out.is_contiguous() and out.dtype == x.dtype:
        seed = int(torch.randint(0, 2**62, (1,)))
        dtype = np.float32 if x.dtype == torch.float32 else np.float64
        _forward_kernel(x.detach().view(-1).numpy(), out.detach().view(-1).numpy(), seed, threshold, dtype(scale))
    else:
        keep = torch.rand(x.shape, device=x.device) < threshold / 2.0**32
        torch.mul(torch.relu(x), keep, out=out).mul_(scale)
    return scale


def activation_grad(out: torch.Tensor, grad: torch.Tensor, scale: float, inplace: bool = False) -> torch.Tensor:
    """The gradient of `activate_into`'s input from its output; into `grad` when `inplace` (no other reader)."""
    if _numba_ok(out) and grad.dtype == out.dtype and (grad.is_contiguous() or not inplace):
        grad = grad.contiguous()
        grad_in = grad if inplace else torch.empty_like(grad)
        dtype = np.float32 if out.dtype == torch.float32 else np.float64
        _backward_kernel(out.view(-1).numpy(), grad.view(-1).numpy(), grad_in.view(-1).numpy(), dtype(scale))
        return grad_in
    if not inplace:
        return torch.where(out > 0, grad * scale, 0)
    grad.masked_fill_(out <= 0, 0)
    return grad if scale == 1.0 else grad.mul_(scale)


class _ReluDropout(torch.autograd.Function):
    """relu(x) * Bernoulli(keep) / keep, written into x when `inplace` (x must then be no other node's saved
    tensor); saves only the output."""

    @staticmethod
    def forward(ctx, x, p, inplace):
        out = x if inplace else torch.empty_like(x, memory_format=torch.contiguous_format)
        ctx.scale = activate_into(x, out, p, True)
        if inplace:
            ctx.mark_dirty(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return activation_grad(out, grad, ctx.scale), None, None


def relu_dropout(x: torch.Tensor, p: float, training: bool, inplace: bool = False) -> torch.Tensor:
    """`F.dropout(F.relu(x), p, training)`; with `inplace` written into `x` (only when no autograd node saved
    `x`) and returned."""
    if not training or p == 0.0:
        return torch.relu_(x) if inplace else torch.relu(x)
    return _ReluDropout.apply(x, p, inplace)


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
