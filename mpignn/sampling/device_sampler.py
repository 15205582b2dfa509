"""A `NeighborSampler` whose batch never leaves the device: `--sample-on device` with one part.

Ids are relabelled on the device in first-appearance order, as the host does, so batches equal the host
sampler's bit for bit and the host reads only their sizes (a few scalars a hop), never an array.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from mpignn.sampling.device_hops import DeviceHops
from mpignn.sampling.neighbor import Fanout, NeighborSampler

__all__ = ["DeviceSampler", "resident"]


def resident(source: Any, num_nodes: int) -> bool:
    """Whether `source` can keep a batch on its device: `DeviceHops` owning every node, one edge type."""
    return isinstance(source, DeviceHops) and source.num_etypes == 1 and source.lo == 0 \
        and len(source.rowptr) - 1 == int(num_nodes)


class DeviceSampler(NeighborSampler):
    """`NeighborSampler`'s batches as tensors on the source's device, relabelled through an array map."""

    def __init__(self, source: DeviceHops, num_nodes: int, fanouts: Sequence[Fanout], method: str = "neighbor",
                 dependency: int = 1, layer_dependency: bool = False, iterations: int = 0) -> None:
        if not resident(source, num_nodes):
            raise ValueError("DeviceSampler needs a DeviceHops source owning every node of one edge type")
        super().__init__(source, num_nodes, fanouts, "array", method, dependency, layer_dependency, iterations)
        self.device = source.device

    def _map(self, ids: torch.Tensor, n_id: torch.Tensor, n_count: int) -> tuple[torch.Tensor, int]:
        scratch = self._scratch()
        new = ids[scratch[ids] < 0]
        uniq, inverse = torch.unique(new, return_inverse=True)
        first = torch.full((len(uniq),), len(new), dtype=torch.int64, device=self.device)
        first.scatter_reduce_(0, inverse, torch.arange(len(new), device=self.device), "amin")
        fresh = uniq[torch.argsort(first)]  # in the order they first appear, as kernels.relabel appends them
        n_id[n_count:n_count + len(fresh)] = fresh
        scratch[fresh] = torch.arange(n_count, n_count + len(fresh), device=self.device)
        return scratch[ids], n_count + len(fresh)

    def _clear(self, n_id: torch.Tensor, n_count: int) -> None:
        self._scratch()[n_id[:n_count]] = -1

    def _seeds(self, seeds: Any) -> torch.Tensor:
        if isinstance(seeds, torch.Tensor):
            return seeds.to(self.device, torch.int64)
        return torch.from_numpy(np.ascontiguousarray(seeds, dtype=np.int64)).to(self.device)

    def _empty(self, size: int) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int64, device=self.device)

    def _targets(self, f_lo: int, f_hi: int, t: int, counts: torch.Tensor) -> torch.Tensor:
        return torch.repeat_interleave(torch.arange(f_lo, f_hi, dtype=torch.int64, device=self.device), counts)

    def _concat(self, parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(parts) if parts else self._empty(0)
