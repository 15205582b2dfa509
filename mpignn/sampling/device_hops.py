"""A rank's hops drawn by the torch-op kernels (`sampling.torch_kernels`) on a torch device: `--sample-on device`.

The CSR is held as tensors on that device (on the CPU they share the part's arrays); each hop's draw runs there
and its answer comes back as numpy, so the rest of the batch is built as with the host kernels, and the draws
are theirs bit for bit. Owners answering remote hops (`sampling.distributed`) and cooperative batches use it too:
they call their `LocalHops`.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from mpignn.sampling import torch_kernels
from mpignn.sampling.neighbor import Fanout, LocalHops, fanout_array

__all__ = ["DeviceHops"]


def _tensor(array: np.ndarray | None, device: torch.device) -> torch.Tensor | None:
    if array is None:
        return None
    with warnings.catch_warnings():  # a memory-mapped part is read-only: the kernels never write to it
        warnings.simplefilter("ignore", UserWarning)
        return torch.as_tensor(array).to(device)


class DeviceHops(LocalHops):
    """`LocalHops` whose draws run as torch ops on `device`."""

    def __init__(self, rowptr: np.ndarray, col: np.ndarray, lo: int = 0, type_rowptr: np.ndarray | None = None,
                 num_etypes: int = 1, device: Any = "cpu") -> None:
        super().__init__(rowptr, col, lo, type_rowptr, num_etypes)
        self.device = torch.device(device)
        self.t_rowptr, self.t_col = _tensor(self.rowptr, self.device), _tensor(self.col, self.device)
        self.t_type_rowptr = _tensor(self.type_rowptr, self.device)

    def _ids(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(array, dtype=np.int64)).to(self.device)  # a batch's ids: small, copied

    def sample(self, gids: np.ndarray, fanout: Fanout, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rows, keys, typed = self.kernel_rows(np.asarray(gids, dtype=np.int64))
        rowptr = self.t_type_rowptr if typed else self.t_rowptr
        fanouts = self._ids(fanout_array(fanout, self.num_etypes))
        counts, nbrs = torch_kernels.sample_rows(rowptr, self.t_col, self._ids(rows), self._ids(keys), fanouts, seed)
        return counts.cpu().numpy(), nbrs.cpu().numpy()

    def sample_labor(self, gids: np.ndarray, fanout: Fanout, seed: int,
                     shift: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.num_etypes > 1:
            raise ValueError("layer-neighbour sampling takes homogeneous graphs")
        rows = self._ids(np.asarray(gids, dtype=np.int64) - self.lo)
        out = torch_kernels.labor_rows(self.t_rowptr, self.t_col, rows, self._ids(fanout_array(fanout, 1)), seed,
                                       shift)
        return tuple(a.cpu().numpy() for a in out)  # type: ignore[return-value]
