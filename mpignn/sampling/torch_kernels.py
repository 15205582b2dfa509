"""The sampling kernels in torch ops, for a CSR that lives on an accelerator (or on the CPU, to check them).
They draw what the numba kernels draw, bit for bit (`tests/test_torch_sampler.py`). torch lacks unsigned 64-bit
arithmetic on some devices, so the streams run on int64 and a right shift is made logical with a mask.
"""
from __future__ import annotations

import torch

__all__ = ["sample_rows", "labor_rows", "importance_scales", "labor_importance"]

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


def _stream(seed: int, gids: torch.Tensor) -> torch.Tensor:
    """Each gid's stream start under `seed`: splitmix(seed ^ gid * golden), as the numba kernels seed it."""
    seed = (int(seed) + (1 << 63)) % (1 << 64) - (1 << 63)  # its uint64 bits as an int64
    return _splitmix(gids * _GOLDEN ^ seed)


def _rows(rowptr: torch.Tensor, rows: torch.Tensor,
          fanouts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(each row's first edge, its degree, its fanout `fanouts[i % len(fanouts)]`), as the numba kernels read them."""
    start = rowptr[rows]
    return start, rowptr[rows + 1] - start, fanouts[torch.arange(len(rows), device=rows.device) % len(fanouts)]


def _edges(deg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(each edge's target index, its place among that target's edges) for targets of degrees `deg`."""
    edge_of = torch.repeat_interleave(torch.arange(len(deg), device=deg.device), deg)
    within = torch.arange(len(edge_of), device=deg.device) - torch.repeat_interleave(torch.cumsum(deg, 0) - deg, deg)
    return edge_of, within


def sample_rows(rowptr: torch.Tensor, col: torch.Tensor, rows: torch.Tensor, gids: torch.Tensor,
                fanouts: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`sampling.kernels.sample_rows` on int64 torch tensors of one device."""
    start, deg, fanout = _rows(rowptr, rows, fanouts)
    counts = torch.where((fanout < 0) | (deg <= fanout), deg, fanout)
    offsets = torch.cumsum(counts, 0) - counts
    out = torch.empty(int(counts.sum()), dtype=torch.int64, device=rows.device)
    drawing = counts < deg
    every = torch.nonzero(~drawing).flatten()  # targets keeping all their neighbours: a plain copy
    edge_of, within = _edges(deg[every])
    out[offsets[every][edge_of] + within] = col[start[every][edge_of] + within]
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
    """`sampling.labor.labor_rows` on torch tensors."""
    start, deg, fanout = _rows(rowptr, rows, fanouts)
    whole = (fanout < 0) | (deg <= fanout)
    denominators = torch.where(whole, deg, fanout)
    edge_of, within = _edges(deg)
    src = col[start[edge_of] + within]
    cut = fanout.to(torch.float64) / deg.clamp(min=1).to(torch.float64)
    keep = whole[edge_of] | (_variates(seed, src, shift) < cut[edge_of])
    counts = torch.zeros(len(rows), dtype=torch.int64, device=rows.device).index_add_(0, edge_of, keep.to(torch.int64))
    return counts, src[keep], denominators


def _variates(seed: int, gids: torch.Tensor, shift: int) -> torch.Tensor:
    """Each node's layer-neighbour variate (`sampling.labor._draw`), float64 in [0, 1)."""
    return ((_shr(_stream(seed, gids), 11) + shift) & _TOP).to(torch.float64) * _UNIT


def _over(k: int, x: torch.Tensor) -> torch.Tensor:
    """k / x rounded once, as numba divides: torch takes `k / x` for 1 / x times k, an ulp off at times."""
    return torch.full_like(x, float(k)).div_(x)


def importance_scales(edge_of: torch.Tensor, deg: torch.Tensor, inverse: torch.Tensor, pi: torch.Tensor,
                      fanout: int) -> torch.Tensor:
    """`sampling.labor.importance_scales` on tensors: the same integer sums and sequential steps, vectorised
    over the saturated targets (at most fanout + 1 steps: one more would leave c = 0)."""
    n, dev = len(deg), deg.device
    out = torch.full((n,), float("inf"), dtype=torch.float64, device=dev)
    if fanout < 0:
        return out
    w = pi[inverse]
    bits = 52 - (torch.frexp(deg.to(torch.float64)).exponent.to(torch.int64) - 11).clamp(min=0)
    scale = ((bits + 1023) << 52).view(torch.float64)  # 2**bits, built from its exponent bits: exact
    total = torch.zeros(n, dtype=torch.int64, device=dev).index_add_(0, edge_of, (w * scale[edge_of]).to(torch.int64))
    rest = total.to(torch.float64) / scale
    top = torch.zeros(n, dtype=torch.float64, device=dev).scatter_reduce_(0, edge_of, w, "amax")
    c = _over(fanout, rest)
    active = deg > fanout
    out = torch.where(active, c, out)
    saturated = active & (c * top >= 1.0)
    sat = torch.nonzero(saturated).flatten()
    if len(sat) == 0:
        return out
    mine = saturated[edge_of]  # their edges, heaviest first within each target
    t_of, w_of = edge_of[mine], w[mine]
    order = torch.argsort(w_of, descending=True, stable=True)
    order = order[torch.argsort(t_of[order], stable=True)]
    weights = w_of[order]
    first = torch.cumsum(deg[sat], 0) - deg[sat]
    rest = rest[sat]
    c = _over(fanout, rest)
    done = torch.zeros(len(sat), dtype=torch.bool, device=dev)
    for j in range(fanout + 1):
        wj = weights[first + j]
        cj = _over(fanout - j, rest)
        c = torch.where(done, c, cj)
        done = done | (cj * wj < 1.0) | (rest <= wj)
        rest = torch.where(done, rest, rest - wj)
    out[sat] = c
    return out


def labor_importance(counts: torch.Tensor, nbrs: torch.Tensor, fanout: int, seed: int, shift: int,
                     iterations: int, normalise: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`sampling.labor.labor_importance` on tensors, bit for bit (`counts[t]` edges of t in `nbrs`). Reads back
    the largest kept count once a hop, to sum each target's weights in the host's order."""
    dev = nbrs.device
    n = len(counts)
    edge_of, _ = _edges(counts)
    sources, inverse = torch.unique(nbrs, return_inverse=True)  # the order of sources changes no result
    pi = torch.ones(len(sources), dtype=torch.float64, device=dev)
    iterations = iterations if fanout != 0 else 0  # as the host's: a hop keeping nothing
    for _ in range(iterations):
        scale = importance_scales(edge_of, counts, inverse, pi, fanout)
        raised = torch.clamp(scale[edge_of] * pi[inverse], max=1.0)
        pi = torch.zeros_like(pi).scatter_reduce_(0, inverse, raised, "amax")
    scale = importance_scales(edge_of, counts, inverse, pi, fanout)
    p = torch.clamp(scale[edge_of] * pi[inverse], max=1.0)
    keep = _variates(seed, sources, shift)[inverse] < p
    whole = (fanout < 0) | (counts <= fanout)
    denominators = torch.where(whole, counts, torch.full_like(counts, fanout))
    q = torch.where(whole, torch.ones(n, dtype=torch.float64, device=dev),
                    _over(fanout, counts.clamp(min=1).to(torch.float64)))
    values = (q[edge_of] / p)[keep]
    kept_of = edge_of[keep]
    kept = torch.zeros(n, dtype=torch.int64, device=dev).index_add_(0, kept_of, torch.ones_like(kept_of))
    weight = values.to(torch.float32)
    if normalise and iterations > 0 and len(values):
        _, within = _edges(kept)
        total = torch.zeros(n, dtype=torch.float64, device=dev)
        for j in range(int(kept.max())):  # one value per target a step: the host's sequential sum
            at = within == j
            total[kept_of[at]] += values[at]
        weight = (weight.to(torch.float64) * (denominators.to(torch.float64) / total)[kept_of]).to(torch.float32)
    return kept, nbrs[keep], denominators, weight
