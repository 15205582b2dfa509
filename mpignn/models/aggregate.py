"""Mean aggregation over one sampled hop (targets <- sources), and its transpose for backward.

The one place that picks a kernel by device, so callers never branch on it. No host syncs: the in-degrees come
from the sampler, or from the sorted targets on the device. Imports torch only.
"""
from __future__ import annotations

import warnings

import torch

__all__ = ["MeanAdjacency", "kernel_for"]


def kernel_for(device: torch.device) -> str:
    """Which kernel aggregates on `device`.

    "cpu_reduce": CSR product with `reduce="sum"` (CPU only in PyTorch). "cusparse": CUDA's SpMM in fp32, no
    atomics, with an explicit transposed CSR so backward is deterministic too. "scatter": gather + `index_add_`
    into fp32 (any device; atomics on GPUs, so not bit-for-bit).
    """
    if device.type == "cpu":
        return "cpu_reduce"
    return "cusparse" if device.type == "cuda" else "scatter"


class MeanAdjacency:
    """Edges `row[i] -> col[i]` (source -> target) with weight 1/in-degree(target), on `row`'s device.

    `mean_t` applies the transposed weights (the gradient of `mean`). Edges must be grouped by target in
    ascending order. `in_degree`, `mean_over` and `edge_weight` are the sampler's (`SampleOutput`); without
    `in_degree` the pointer is a binary search over `col`.
    """

    def __init__(self, row: torch.Tensor, col: torch.Tensor, n_dst: int, n_src: int,
                 in_degree: torch.Tensor | None = None, mean_over: torch.Tensor | None = None,
                 edge_weight: torch.Tensor | None = None) -> None:
        self.row, self.col, self.n_dst, self.n_src = row, col, int(n_dst), int(n_src)
        self.kernel = kernel_for(row.device)
        if in_degree is None:  # sorted targets: the CSR pointer is a search, no bincount (a host sync on GPUs)
            steps = torch.arange(self.n_dst + 1, dtype=col.dtype, device=col.device)
            self._crow = torch.searchsorted(col, steps)
            counts = self._crow.diff()
        else:
            counts = in_degree[:self.n_dst].to(device=row.device, dtype=torch.long)
            self._crow = None
            if self.kernel != "scatter":
                self._crow = torch.zeros(self.n_dst + 1, dtype=torch.long, device=row.device)
                torch.cumsum(counts, 0, out=self._crow[1:])
        if mean_over is not None:
            counts = mean_over[:self.n_dst].to(device=row.device, dtype=torch.long)
        self.weight = (1.0 / counts.clamp(min=1).to(torch.float32))[col]
        if edge_weight is not None:
            self.weight = self.weight * edge_weight.to(device=row.device, dtype=torch.float32)
        self._t: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._t_csr: torch.Tensor | None = None

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel == "cpu_reduce":
            return torch.sparse.mm(_csr(self._crow, self.row, self.weight.to(x.dtype), self.n_dst, self.n_src),
                                   x, "sum")
        if self.kernel == "cusparse":
            csr = _csr(self._crow, self.row, self.weight, self.n_dst, self.n_src)
            return torch.sparse.mm(csr, x.float()).to(x.dtype)
        return _scatter_mean(x, self.row, self.col, self.weight, self.n_dst)

    def mean_t(self, grad: torch.Tensor) -> torch.Tensor:
        if self.kernel == "cpu_reduce":  # the transposed CSR built on the first call (a kept batch's: once)
            if self._t_csr is None or self._t_csr.dtype != grad.dtype:
                csr = _csr(self._crow, self.row, self.weight.to(grad.dtype), self.n_dst, self.n_src)
                self._t_csr = csr.t().to_sparse_csr()
            return torch.sparse.mm(self._t_csr, grad, "sum")
        if self.kernel == "cusparse":
            if self._t is None:  # the sources x targets CSR, built on the first call: deterministic, no host sync
                order = torch.argsort(self.row, stable=True)
                rows = self.row[order]
                steps = torch.arange(self.n_src + 1, dtype=rows.dtype, device=rows.device)
                self._t = (torch.searchsorted(rows, steps), self.col[order], self.weight[order])
            return torch.sparse.mm(_csr(*self._t, self.n_src, self.n_dst), grad.float()).to(grad.dtype)
        return _scatter_mean(grad, self.col, self.row, self.weight, self.n_src)


def _csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, n_rows: int, n_cols: int) -> torch.Tensor:
    with warnings.catch_warnings():  # torch warns on every CSR tensor built; these products are tested
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, size=(n_rows, n_cols), check_invariants=False)


def _scatter_mean(x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor,
                  n_out: int) -> torch.Tensor:
    """out[dst[i]] += weight[i] * x[src[i]], summed in fp32 (bf16 atomics would round every addition)."""
    out = torch.zeros((n_out,) + tuple(x.shape[1:]), dtype=torch.float32, device=x.device)
    if src.numel():
        out.index_add_(0, dst, x.index_select(0, src).float() * weight.unsqueeze(1))
    return out.to(x.dtype)
