"""What a full-graph batch (`--minibatch full`: every neighbour of every hop, the batch kept for every epoch)
carries for the model besides PyG's fields: each row's whole-graph degree, and its input rows as a sparse matrix
where they are mostly zeros.

Bag-of-words features make the first layer's dense products most of a full-graph epoch (Coauthor CS: 6,805
columns, 0.9% non-zero; PyG's full-batch GraphSAGE spends most of its epoch there). A kept batch's input rows
never change, so their CSR (and its transpose, for the weights' gradients) is built once, after the halo filled
the table, and the first layer multiplies it (`models.sampled`).
"""
from __future__ import annotations

import warnings
from typing import Any

import torch

__all__ = ["WholeNeighbourhoods", "SPARSE_DENSITY"]

SPARSE_DENSITY = 0.05
"""Input tables with at most this share of non-zeros go sparse (measured: docs/training.md, full-graph training)."""


class WholeNeighbourhoods:
    """`degree`: float32 [own rows], each row's loop-free in-degree in the whole graph (GCN's normalisation).
    `sparse_rows(table)`: the table's rows and those of its transpose, each as (column ids, each row's start,
    float32 values), or None where it is dense; built on the first call for a table and kept. As `embedding_bag`
    takes them: a sparse product is a weighted sum of a weight matrix's rows (2x faster than torch's CSR product
    on CPU, both directions)."""

    def __init__(self, degree: torch.Tensor, density: float | None = None) -> None:
        self.degree, self.density = degree, SPARSE_DENSITY if density is None else density
        self._table: Any = None
        self._rows: tuple[torch.Tensor, torch.Tensor] | None = None

    def sparse_rows(self, table: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] | None:
        if self._table is not table:
            self._table, self._rows = table, _csr_pair(table, self.density)
        return self._rows


def _csr_pair(table: torch.Tensor, density: float) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] | None:
    """The CSR of `table` and of its transpose (see `sparse_rows`) in float32 on its device, or None above
    `density` non-zeros."""
    values = table.detach().float()
    if not values.numel() or int(torch.count_nonzero(values)) > density * values.numel():
        return None
    with warnings.catch_warnings():  # "sparse CSR support is in beta": only its layout is used
        warnings.simplefilter("ignore", UserWarning)
        pair = values.to_sparse_csr(), values.t().contiguous().to_sparse_csr()
    return tuple((m.col_indices(), m.crow_indices()[:-1].contiguous(), m.values()) for m in pair)
