"""Seeds -> sample -> features -> PyG `Data` mini-batches on the rank's device.

This is the first module that imports torch-geometric. Each epoch every rank yields the same number of
batches (`mpignn.mpi.steps_per_epoch`), so DDP and the exchanges never wait on a rank that has stopped.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch_geometric.data import Data

from mpignn.exchange.features import FeatureStore
from mpignn.mpi import chunk_bounds, pad_to_steps, steps_per_epoch
from mpignn.sampling import kernels
from mpignn.sampling.neighbor import NeighborSampler

__all__ = ["NodeLoader", "LoaderTimes"]


@dataclass
class LoaderTimes:
    """Seconds spent producing batches, by stage (summed over the epoch)."""

    sample_s: float = 0.0
    exchange_s: float = 0.0


class NodeLoader:
    """Iterate over mini-batches of `seeds` (global ids of this rank's nodes).

    Args:
        sampler: the multi-hop sampler (local or distributed hops).
        features: where node features and labels come from.
        seeds: global ids this rank trains (or evaluates) on.
        comm: when given, the step count is agreed over it (collective, in the constructor); required when
            the sampler or the features talk to other ranks.
        prefetch: sample the next batch in a background thread while the current one trains; only allowed
            when nothing here is collective (one part).
        wrap: a rank with fewer seeds than steps repeats seeds (training: every DDP step has data); without
            it the surplus steps are empty (evaluation: every seed counts once).
    """

    def __init__(self, sampler: NeighborSampler, features: FeatureStore, seeds: np.ndarray, batch_size: int, *,
                 shuffle: bool = True, drop_last: bool = False, seed: int = 0, comm: Any = None,
                 device: str | torch.device = "cpu", prefetch: bool = False, wrap: bool = True) -> None:
        self.sampler, self.features = sampler, features
        self.seeds = np.asarray(seeds, dtype=np.int64)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.seed, self.device, self.prefetch, self.wrap = seed, torch.device(device), prefetch, wrap
        self.rank = comm.rank if comm is not None else 0
        if comm is not None and comm.size > 1:
            self.steps = steps_per_epoch(comm, len(self.seeds), batch_size, drop_last)
        else:
            n = len(self.seeds)
            self.steps = n // batch_size if drop_last else -(-n // batch_size)
        self.epoch = 0
        self.times = LoaderTimes()

    def __len__(self) -> int:
        return self.steps

    def set_epoch(self, epoch: int) -> None:
        """Use epoch `epoch`'s shuffle and random streams (call before iterating, as with DistributedSampler)."""
        self.epoch = epoch

    def _batches(self) -> list[np.ndarray]:
        seeds = self.seeds
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch, self.rank])
            seeds = seeds[rng.permutation(len(seeds))]
        if self.wrap or self.drop_last:
            return pad_to_steps(seeds, self.steps, self.batch_size, self.drop_last)
        return [seeds[a:b] for a, b in (chunk_bounds(len(seeds), self.steps, i) for i in range(self.steps))]

    def _make(self, step: int, seeds: np.ndarray) -> Data:
        t0 = time.perf_counter()
        batch_seed = kernels.mix_seed(kernels.mix_seed(self.seed, self.epoch), self.rank * 1_000_003 + step)
        out = self.sampler.sample(seeds, batch_seed)
        t1 = time.perf_counter()
        x, y = self.features.gather(out.n_id)
        t2 = time.perf_counter()
        self.times.sample_s += t1 - t0
        self.times.exchange_s += t2 - t1
        data = Data(x=torch.from_numpy(x), y=torch.from_numpy(y),
                    edge_index=torch.from_numpy(np.stack([out.row, out.col])), n_id=torch.from_numpy(out.n_id))
        data.batch_size = out.batch_size
        data.num_sampled_nodes = out.num_sampled_nodes
        data.num_sampled_edges = out.num_sampled_edges
        return data

    def _to_device(self, data: Data) -> Data:
        if self.device.type == "cpu":
            return data
        return data.to(self.device, non_blocking=True)

    def __iter__(self) -> Iterator[Data]:
        batches = self._batches()
        self.times = LoaderTimes()
        if not self.prefetch or len(batches) < 2:
            for step, seeds in enumerate(batches):
                yield self._to_device(self._make(step, seeds))
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mpignn-sampler") as pool:
            pending = pool.submit(self._make, 0, batches[0])
            for step in range(len(batches)):
                data = pending.result()
                if step + 1 < len(batches):
                    pending = pool.submit(self._make, step + 1, batches[step + 1])
                yield self._to_device(data)
