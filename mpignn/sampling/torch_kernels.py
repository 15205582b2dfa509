"""The sampling kernels in torch ops, for a CSR that lives on an accelerator (or on the CPU, to check them).

They draw what the numba kernels draw, bit for bit (`tests/test_torch_sampler.py`): the same counter-based
streams (SplitMix64 of the hop seed and the node's global id), the same Floyd draw for neighbour sampling and
the same variate per source for layer-neighbour sampling. So where a hop is drawn never changes what trains.
torch has no unsigned 64-bit arithmetic on every device, so the streams run on int64: adding and multiplying
wrap the same way, and a right shift is made logical with a mask.

A batch's draw is vectorised over its targets: Floyd's k steps are k tensor operations over all the targets that
draw (k the fanout), each comparing with the picks so far.
"""
from __future__ import annotations

import torch

__all__ = ["sample_rows", "labor_rows"]

_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)  # the uint64 constants, as int64 bit patterns
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)
_UNIT = 1.0 / 9007199254740992.0  # 2**-53, as `sampling.labor`
_TOP = (1 << 53) - 1  # a rotated draw wraps at 2**53 (`sampling.labor.window`)


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix(z: torch.Tensor) -> torch.Tensor:
    z = z + _GOLDEN
    z = (z ^ _shr(z, 30)) * _MIX1
    z = (z ^ _shr(z, 27)) * _MIX2
    return z ^ _shr(z, 31)


def _as_int64(seed: int) -> int:
    """A seed in [0, 2**64) as the int64 with its bits."""
    seed = int(seed) & ((1 << 64) - 1)
    return seed - (1 << 64) if seed >= 1 << 63 else seed


def _stream(seed: int, gids: torch.Tensor) -> torch.Tensor:
    """Each gid's stream start under `seed`: splitmix(seed ^ gid * golden), as the numba kernels seed it."""
    return _splitmix(gids * _GOLDEN ^ _as_int64(seed))


def _degrees(rowptr: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    start = rowptr[rows]
    return start, rowptr[rows + 1] - start


def _edges(deg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every edge of targets with degrees `deg`, in target order: (its target's index, its place among that
    target's edges)."""
    edge_of = torch.repeat_interleave(torch.arange(len(deg), device=deg.device), deg)
    within = torch.arange(len(edge_of), device=deg.device) - torch.repeat_interleave(torch.cumsum(deg, 0) - deg, deg)
    return edge_of, within


def _copy_all(col: torch.Tensor, start: torch.Tensor, deg: torch.Tensor, out: torch.Tensor,
              offsets: torch.Tensor, which: torch.Tensor) -> None:
    """Write every neighbour of the targets `which` to their places in `out`."""
    edge_of, within = _edges(deg[which])
    out[offsets[which][edge_of] + within] = col[start[which][edge_of] + within]


def sample_rows(rowptr: torch.Tensor, col: torch.Tensor, rows: torch.Tensor, gids: torch.Tensor,
                fanouts: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`sampling.kernels.sample_rows` on torch tensors (int64, one device): (counts per target, neighbours
    concatenated in target order)."""
    n = len(rows)
    start, deg = _degrees(rowptr, rows)
    fanout = fanouts[torch.arange(n, device=rows.device) % len(fanouts)]
    counts = torch.where((fanout < 0) | (deg <= fanout), deg, fanout)
    offsets = torch.cumsum(counts, 0) - counts
    out = torch.empty(int(counts.sum()), dtype=torch.int64, device=rows.device)
    drawing = counts < deg
    _copy_all(col, start, deg, out, offsets, torch.nonzero(~drawing).flatten())
    which = torch.nonzero(drawing).flatten()
    if len(which):
        k, d = counts[which], deg[which]
        state = _stream(seed, gids[which])
        picks = torch.full((len(which), int(k.max())), -1, dtype=torch.int64, device=rows.device)
        for m in range(picks.shape[1]):  # Floyd: step m draws among the first d - k + m + 1 positions
            j = d - k + m
            state = _splitmix(state)
            t = _shr(state, 11) % (j + 1)
            t = torch.where((picks[:, :m] == t[:, None]).any(1), j, t)
            picks[:, m] = torch.where(m < k, t, -1)
        kept = picks >= 0
        slot = offsets[which][:, None] + torch.arange(picks.shape[1], device=rows.device)
        out[slot[kept]] = col[(start[which][:, None] + picks)[kept]]
    return counts, out


def labor_rows(rowptr: torch.Tensor, col: torch.Tensor, rows: torch.Tensor, fanouts: torch.Tensor,
               seed: int, shift: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`sampling.labor.labor_rows` on torch tensors: (counts, kept sources in target order and CSR order within
    a target, denominators min(degree, fanout))."""
    n = len(rows)
    start, deg = _degrees(rowptr, rows)
    fanout = fanouts[torch.arange(n, device=rows.device) % len(fanouts)]
    whole = (fanout < 0) | (deg <= fanout)
    denominators = torch.where(whole, deg, fanout)
    edge_of, within = _edges(deg)
    src = col[start[edge_of] + within]
    draw = ((_shr(_stream(seed, src), 11) + shift) & _TOP).to(torch.float64) * _UNIT
    cut = fanout.to(torch.float64) / deg.clamp(min=1).to(torch.float64)
    keep = whole[edge_of] | (draw < cut[edge_of])
    counts = torch.zeros(n, dtype=torch.int64, device=rows.device).index_add_(0, edge_of, keep.to(torch.int64))
    return counts, src[keep], denominators
