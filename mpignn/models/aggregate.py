"""Mean aggregation over one sampled hop (targets <- sources), and its transpose for backward.

The one place that picks a kernel by device: on CPU a CSR sparse-dense product with `reduce="sum"` (no
[edges x features] message tensor; PyTorch implements that `reduce` only for CSR on CPU), elsewhere (CUDA,
XPU) a portable gather + `index_add_`, which is what PyG's SAGEConv does on GPUs without torch-sparse. Both
compute the same sums (tests/test_models.py runs both on CPU); callers never branch on the device.
"""
from __future__ import annotations

import warnings

import torch

__all__ = ["MeanAdjacency"]


class MeanAdjacency:
    """Edges `row[i] -> col[i]` (source -> target) with weight 1/in-degree(target), on `row`'s device.

    `mean(x)` is the mean over each target's in-neighbours ([n_src, F] -> [n_dst, F]); `mean_t(g)` applies
    the transposed weights ([n_dst, F] -> [n_src, F]), the gradient of `mean`. Edges must be grouped by
    target in ascending order (mpignn's loader emits them so; `SampledGNN` sorts other inputs).
    """

    def __init__(self, row: torch.Tensor, col: torch.Tensor, n_dst: int, n_src: int) -> None:
        self.row, self.col, self.n_dst, self.n_src = row, col, int(n_dst), int(n_src)
        counts = torch.bincount(col, minlength=self.n_dst)
        self.weight = (1.0 / counts.clamp(min=1).to(torch.float32))[col]
        self.fused = _has_fused_kernel(row.device)
        self._crow = None
        if self.fused:
            self._crow = torch.zeros(self.n_dst + 1, dtype=torch.long, device=row.device)
            torch.cumsum(counts, 0, out=self._crow[1:])

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return torch.sparse.mm(self._csr(x.dtype), x, "sum")
        return _scatter_mean(x, self.row, self.col, self.weight, self.n_dst)

    def mean_t(self, grad: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return torch.sparse.mm(self._csr(grad.dtype).t().to_sparse_csr(), grad, "sum")
        return _scatter_mean(grad, self.col, self.row, self.weight, self.n_src)

    def _csr(self, dtype: torch.dtype) -> torch.Tensor:
        with warnings.catch_warnings():  # torch warns on every CSR tensor built; this product is tested
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return torch.sparse_csr_tensor(self._crow, self.row, self.weight.to(dtype),
                                           size=(self.n_dst, self.n_src), check_invariants=False)


def _has_fused_kernel(device: torch.device) -> bool:
    """`torch.sparse.mm(csr, x, "sum")` exists for CSR on CPU only (PyTorch's docs of `reduce`)."""
    return device.type == "cpu"


def _scatter_mean(x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor,
                  n_out: int) -> torch.Tensor:
    """out[dst[i]] += weight[i] * x[src[i]]: the portable kernel (any device, any float dtype)."""
    out = torch.zeros((n_out,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    if src.numel():
        out.index_add_(0, dst, x.index_select(0, src) * weight.to(x.dtype).unsqueeze(1))
    return out
