"""What a full-graph batch (`--minibatch full`) carries besides PyG's fields: each row's whole-graph degree, and
its input rows as a sparse matrix where mostly zeros. Bag-of-words products are most of a full-graph epoch
(docs/training.md), and a kept batch's rows never change, so their CSR is built once.
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
    """`degree`: float32 [own rows], each row's loop-free whole-graph in-degree (GCN's normalisation).
    `sparse`: whether input rows are multiplied sparse (the same on every rank: it decides layer 0's exchange).
    `sparse_rows(table, n)`: the first `n` rows and their transpose as `embedding_bag` takes them (its speed:
    docs/training.md), None where dense; built once per table and `n`."""

    def __init__(self, degree: torch.Tensor, sparse: bool) -> None:
        self.degree, self.sparse = degree, sparse
        self._table: Any = None
        self._rows: dict[int, tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = {}
        self._kept: dict[Any, Any] = {}

    def kept(self, key: Any, make: Any) -> Any:
        """`make()`'s result, made once per `key` and kept with the batch (its layers' means)."""
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]

    def sparse_rows(self, table: torch.Tensor, n: int) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] | None:
        if not self.sparse:
            return None
        if self._table is not table:
            self._table, self._rows = table, {}
        if n not in self._rows:
            values = table[:n].detach().float()
            with warnings.catch_warnings():  # "sparse CSR support is in beta": only its layout is used
                warnings.simplefilter("ignore", UserWarning)
                pair = values.to_sparse_csr(), values.t().contiguous().to_sparse_csr()
            self._rows[n] = tuple((m.col_indices(), m.crow_indices()[:-1].contiguous(), m.values()) for m in pair)
        return self._rows[n]


def sparse_input(rows: torch.Tensor, comm: Any = None) -> bool:
    """Whether input rows (over all ranks of `comm`, collective) have at most `SPARSE_DENSITY` non-zeros."""
    counts = np.array([int(torch.count_nonzero(rows)), rows.numel()], dtype=np.int64)
    if comm is not None:
        counts = comm.allreduce(counts)  # numpy arrays sum element-wise
    return bool(counts[1] > 0 and counts[0] <= SPARSE_DENSITY * counts[1])
