"""What a full-graph batch (`--minibatch full`: every neighbour of every hop, the batch kept for every epoch)
carries for the model besides PyG's fields: each row's whole-graph degree, and its input rows as a sparse matrix
where they are mostly zeros.

Bag-of-words features make the first layer's dense products most of a full-graph epoch (docs/training.md). A
kept batch's input rows never change, so their CSR (and its transpose, for the weights' gradients) is built
once, from this rank's own rows, and the first layer multiplies it (`models.sparse_input`).
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

__all__ = ["WholeNeighbourhoods", "SPARSE_DENSITY", "sparse_input"]

SPARSE_DENSITY = 0.05
"""Input tables with at most this share of non-zeros go sparse (measured: docs/training.md, full-graph training)."""


class WholeNeighbourhoods:
    """`degree`: float32 [own rows], each row's loop-free in-degree in the whole graph (GCN's normalisation).
    `sparse`: whether the input rows are multiplied as a sparse matrix (`sparse_input`; the same on every rank,
    whose layer-0 exchange it decides). `sparse_rows(table, n)`: the first `n` rows of the table and their
    transpose, each as (column ids, each row's start, float32 values), or None where the input is dense; built on
    the first call for a table and `n`, and kept. As `embedding_bag` takes them: a sparse product is a weighted
    sum of a weight matrix's rows (2x faster than torch's CSR product on CPU, both directions)."""

    def __init__(self, degree: torch.Tensor, sparse: bool) -> None:
        self.degree, self.sparse = degree, sparse
        self._table: Any = None
        self._rows: dict[int, tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = {}
        self._kept: dict[Any, Any] = {}

    def kept(self, key: Any, make: Any) -> Any:
        """What `make()` returns, made on the first call for `key` and kept with the batch (its layers' means:
        `models.sampled`)."""
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]

    def sparse_rows(self, table: torch.Tensor, n: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] | None:
        if not self.sparse:
            return None
        if self._table is not table:
            self._table, self._rows = table, {}
        if n not in self._rows:
            self._rows[n] = _csr_pair(table[:n])
        return self._rows[n]


def sparse_input(rows: torch.Tensor, comm: Any = None) -> bool:
    """Whether input rows (this rank's own; over all ranks of `comm`, collective) have at most
    `SPARSE_DENSITY` non-zeros."""
    counts = np.array([int(torch.count_nonzero(rows)), rows.numel()], dtype=np.int64)
    if comm is not None:
        counts = comm.allreduce(counts)  # numpy arrays sum element-wise
    return bool(counts[1] > 0 and counts[0] <= SPARSE_DENSITY * counts[1])


def _csr_pair(table: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """The CSR of `table` and of its transpose (see `sparse_rows`) in float32 on its device."""
    values = table.detach().float()
    with warnings.catch_warnings():  # "sparse CSR support is in beta": only its layout is used
        warnings.simplefilter("ignore", UserWarning)
        pair = values.to_sparse_csr(), values.t().contiguous().to_sparse_csr()
    return tuple((m.col_indices(), m.crow_indices()[:-1].contiguous(), m.values()) for m in pair)
