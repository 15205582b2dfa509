"""A rank's hops drawn by the torch-op kernels on a torch device (`--sample-on device`), bit for bit the host's.
Asked with numpy ids it answers numpy; asked with device ids (`DeviceSampler`) it answers there.
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

    _kernels = {"sample_rows": torch_kernels.sample_rows, "labor_rows": torch_kernels.labor_rows}

    def _draw(self, kernel: str, typed: bool, ids: tuple, fanout: Fanout, *args: int) -> tuple:
        """Ids on the device (a `DeviceSampler`'s batch, homogeneous) are answered there, as tensors."""
        resident = isinstance(ids[0], torch.Tensor)
        rowptr = self.t_type_rowptr if typed else self.t_rowptr
        key = tuple(fanout_array(fanout, self.num_etypes).tolist())
        if key not in self._fanout_tensors:  # one upload per fanout, not per hop
            self._fanout_tensors[key] = self._ids(np.array(key, dtype=np.int64))
        out = self._kernels[kernel](rowptr, self.t_col, *(i if resident else self._ids(i) for i in ids),
                                    self._fanout_tensors[key], *args)
        return out if resident else tuple(a.cpu().numpy() for a in out)
