"""A rank's hops drawn by the torch-op kernels on a torch device (`--sample-on device`), bit for bit the host's.
Asked with numpy ids it answers numpy; asked with device ids (`DeviceSampler`) it answers there.
docs/launchers-and-devices.md.
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
        self._fanout_tensors: dict[tuple[int, ...], torch.Tensor] = {}

    def _ids(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(array, dtype=np.int64)).to(self.device)  # a batch's ids: small, copied

    def _fanouts(self, fanout: Fanout) -> torch.Tensor:
        key = tuple(fanout_array(fanout, self.num_etypes).tolist())
        if key not in self._fanout_tensors:  # one upload per fanout, not per hop
            self._fanout_tensors[key] = self._ids(np.array(key, dtype=np.int64))
        return self._fanout_tensors[key]

    def sample(self, gids: np.ndarray, fanout: Fanout, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Ids on the device (a `DeviceSampler`'s batch, homogeneous) are answered there, as tensors."""
        resident = isinstance(gids, torch.Tensor)
        rows, keys, typed = self.kernel_rows(gids if resident else np.asarray(gids, dtype=np.int64))
        rowptr = self.t_type_rowptr if typed else self.t_rowptr
        if not resident:
            rows, keys = self._ids(rows), self._ids(keys)
        counts, nbrs = torch_kernels.sample_rows(rowptr, self.t_col, rows, keys, self._fanouts(fanout), seed)
        return (counts, nbrs) if resident else (counts.cpu().numpy(), nbrs.cpu().numpy())

    def sample_labor(self, gids: np.ndarray, fanout: Fanout, seed: int,
                     shift: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.num_etypes > 1:
            raise ValueError("layer-neighbour sampling takes homogeneous graphs")
        resident = isinstance(gids, torch.Tensor)
        rows = gids - self.lo if resident else self._ids(np.asarray(gids, dtype=np.int64) - self.lo)
        out = torch_kernels.labor_rows(self.t_rowptr, self.t_col, rows, self._fanouts(fanout), seed, shift)
        return out if resident else tuple(a.cpu().numpy() for a in out)  # type: ignore[return-value]
