"""Seeds -> sample -> features -> PyG `Data` mini-batches on the rank's device.

This is the first module that imports torch-geometric. Each epoch every rank yields the same number of
batches (`mpignn.mpi.steps_per_epoch`), so DDP and the exchanges never wait on a rank that has stopped.
For an accelerator, features are gathered straight into pinned host memory and copied on a side stream;
with `prefetch`, a producer thread samples, exchanges and copies batch k+1 while batch k computes.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch
from torch_geometric.data import Data

from mpignn.device import Uploader, pinned_empty, synchronize
from mpignn.exchange.features import FeatureStore
from mpignn.mpi import chunk_bounds, pad_to_steps, steps_per_epoch
from mpignn.sampling import kernels
from mpignn.sampling.neighbor import NeighborSampler

__all__ = ["NodeLoader", "LinkSeeds", "LoaderTimes"]


class LinkSeeds:
    """Link prediction's seeds: positive pairs (global ids, [2, E]), each batch adding negatives.

    Training draws fresh negatives per batch from the batch's seed: `uniform` pairs (both ends uniform over
    all `num_nodes` nodes, as PyG's binary negative sampling) or `tail` (each positive's source with a uniform
    target), `ratio` per positive. Evaluation passes fixed negatives instead: `fixed_neg` [2, E] (one per
    positive, for AUC) and `tails` [E, K] (targets per positive, for MRR/Hits@K). A batch's
    `edge_label_index` lists positives, then negatives, then each positive's K tails (`num_pos`, `num_tails`
    say where each part starts); `edge_label` is 1 for positives, else 0.
    """

    def __init__(self, pos: np.ndarray, num_nodes: int, *, negatives: str = "uniform", ratio: int = 1,
                 fixed_neg: np.ndarray | None = None, tails: np.ndarray | None = None) -> None:
        self.pos = np.asarray(pos, dtype=np.int64).reshape(2, -1)
        self.num_nodes, self.negatives, self.ratio = int(num_nodes), negatives, int(ratio)
        self.fixed_neg, self.tails = fixed_neg, tails

    def __len__(self) -> int:
        return self.pos.shape[1]

    def pairs(self, items: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(pairs [2, P], labels [P], positives, tails per positive) of the positives `items`."""
        pos = self.pos[:, items]
        if self.fixed_neg is not None:
            neg = self.fixed_neg[:, items]
        else:
            rng = np.random.default_rng(seed)
            k = len(items) * self.ratio
            src = np.tile(pos[0], self.ratio) if self.negatives == "tail" else rng.integers(0, self.num_nodes, k)
            neg = np.stack([src, rng.integers(0, self.num_nodes, k)])
        parts = [pos, neg]
        k_tails = 0
        if self.tails is not None:
            k_tails = self.tails.shape[1]
            parts.append(np.stack([np.repeat(pos[0], k_tails), self.tails[items].reshape(-1)]))
        pairs = np.concatenate(parts, axis=1)
        labels = np.zeros(pairs.shape[1], dtype=np.float32)
        labels[:len(items)] = 1.0
        return pairs, labels, len(items), k_tails


@dataclass
class LoaderTimes:
    """Seconds spent producing batches, by stage (summed over the epoch), and how long the consumer waited
    for them (equal to their sum without prefetch, less with it: the part that did not overlap compute)."""

    sample_s: float = 0.0
    exchange_s: float = 0.0  # features from owners and cache, and the copy to the device
    wait_s: float = 0.0


class NodeLoader:
    """Iterate over mini-batches of `seeds`: global ids of this rank's nodes, or its positive pairs
    (`LinkSeeds`, link prediction: the batch samples around both ends of positives and negatives).

    Args:
        sampler: the multi-hop sampler (local or distributed hops).
        features: where node features and labels come from.
        seeds: global ids this rank trains (or evaluates) on, or a LinkSeeds.
        comm: when given, the step count is agreed over it (collective, in the constructor); required when
            the sampler or the features talk to other ranks.
        prefetch: sample the next batch in a background thread while the current one trains; only allowed
            when nothing here is collective (one part).
        wrap: a rank with fewer seeds than steps repeats seeds (training: every DDP step has data); without
            it the surplus steps are empty (evaluation: every seed counts once).
        max_steps: at most this many steps per epoch (0: all): the first max_steps batches of each epoch's
            shuffle. The cap is the same on every rank, so the agreed step count stays agreed.
        layout: a `hetero_batch.HeteroLayout` for a heterogeneous graph: batches are then PyG `HeteroData`
            (seeds first in the target type; `batch.y`, `batch.batch_size` and `batch.n_id` on the batch too).
    """

    def __init__(self, sampler: NeighborSampler, features: FeatureStore, seeds: np.ndarray, batch_size: int, *,
                 shuffle: bool = True, drop_last: bool = False, seed: int = 0, comm: Any = None,
                 device: str | torch.device = "cpu", prefetch: bool = False, wrap: bool = True,
                 max_steps: int = 0, layout: Any = None) -> None:
        self.sampler, self.features = sampler, features
        self.links = seeds if isinstance(seeds, LinkSeeds) else None
        self.seeds = np.arange(len(seeds), dtype=np.int64) if self.links else np.asarray(seeds, dtype=np.int64)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.seed, self.device, self.prefetch, self.wrap = seed, torch.device(device), prefetch, wrap
        self.layout = layout
        self.rank = comm.rank if comm is not None else 0
        if comm is not None and comm.size > 1:
            self.steps = steps_per_epoch(comm, len(self.seeds), batch_size, drop_last)
        else:
            n = len(self.seeds)
            self.steps = n // batch_size if drop_last else -(-n // batch_size)
        self.capped = 0 < max_steps < self.steps
        if self.capped:
            self.steps = max_steps
        self.epoch, self.start_step, self.end_step = 0, 0, None
        self.times = LoaderTimes()
        self.uploader = Uploader(self.device)

    def __len__(self) -> int:
        return self.steps

    def set_epoch(self, epoch: int, start_step: int = 0, end_step: int | None = None) -> None:
        """Use epoch `epoch`'s shuffle and random streams (call before iterating, as with DistributedSampler);
        the next pass yields steps [start_step, end_step) of the epoch (a run resumed mid-epoch, or evaluated
        inside it) with the batches a whole pass would have had there."""
        self.epoch, self.start_step, self.end_step = epoch, start_step, end_step

    def _batches(self) -> list[np.ndarray]:
        seeds = self.seeds
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch, self.rank])
            seeds = seeds[rng.permutation(len(seeds))]
        if self.capped:
            seeds = seeds[:self.steps * self.batch_size]
        if self.wrap or self.drop_last:
            return pad_to_steps(seeds, self.steps, self.batch_size, self.drop_last)
        return [seeds[a:b] for a, b in (chunk_bounds(len(seeds), self.steps, i) for i in range(self.steps))]

    def _make(self, step: int, seeds: np.ndarray) -> Data:
        t0 = time.perf_counter()
        batch_seed = kernels.mix_seed(kernels.mix_seed(self.seed, self.epoch), self.rank * 1_000_003 + step)
        if self.links is None:
            out = self.sampler.sample(seeds, batch_seed)
        else:
            pairs, labels, num_pos, num_tails = self.links.pairs(seeds, batch_seed)
            out = self.sampler.sample_from_edges(pairs[0], pairs[1], batch_seed)
        t1 = time.perf_counter()
        buffer = None
        if self.features.on_host and self.device.type != "cpu":
            rows = pinned_empty((len(out.n_id), self.features.num_features), _torch_dtype(self.features.x),
                                self.device)
            buffer = rows.numpy()
        x, y = self.features.gather(out.n_id, out=buffer)
        x = rows if buffer is not None else (torch.from_numpy(x) if isinstance(x, np.ndarray) else x)
        if x.dtype == torch.uint16:  # a bf16 feature table holds bfloat16 bits (data.features)
            x = x.view(torch.bfloat16)
        if self.layout is not None:  # heterogeneous: cut by type into PyG's HeteroData
            data = self.layout.split(x, torch.from_numpy(y), out.n_id, out.row, out.col, out.edge_type,
                                     out.num_sampled_nodes, out.num_sampled_edges, out.batch_size,
                                     device=self.device)
            return self._finish(data, x, t0, t1)
        edge_index = pinned_empty((2, len(out.row)), torch.int64, self.device)
        edge_index[0].numpy()[:], edge_index[1].numpy()[:] = out.row, out.col
        data = Data(x=x, y=torch.from_numpy(y), edge_index=edge_index, n_id=torch.from_numpy(out.n_id))
        data.batch_size = out.batch_size
        data.num_sampled_nodes = out.num_sampled_nodes
        data.num_sampled_edges = out.num_sampled_edges
        data.in_degree = torch.from_numpy(out.in_degree)  # the model's CSR pointers: no bincount on the device
        if self.links is not None:
            data.edge_label_index = torch.from_numpy(out.edge_label_index)
            data.edge_label = torch.from_numpy(labels)
            data.num_pos, data.num_tails = num_pos, num_tails
        return self._finish(data, x, t0, t1)

    def _finish(self, data: Any, x: torch.Tensor, t0: float, t1: float) -> Any:
        data = self.uploader.upload(data)
        if not self.features.on_host:
            synchronize(x.device)  # a device exchange is queued work until here
        self.times.sample_s += t1 - t0
        self.times.exchange_s += time.perf_counter() - t1
        return data

    def __iter__(self) -> Iterator[Data]:
        batches = self._batches()[:self.end_step]
        self.times = LoaderTimes()
        first = min(self.start_step, len(batches))
        if not self.prefetch or len(batches) - first < 2:
            for step, seeds in enumerate(batches[first:], start=first):
                t0 = time.perf_counter()
                data = self._make(step, seeds)
                self.times.wait_s += time.perf_counter() - t0
                yield self.uploader.adopt(data)
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mpignn-loader") as pool:
            pending = pool.submit(self._make, first, batches[first])
            for step in range(first, len(batches)):
                t0 = time.perf_counter()
                data = pending.result()
                self.times.wait_s += time.perf_counter() - t0
                if step + 1 < len(batches):
                    pending = pool.submit(self._make, step + 1, batches[step + 1])
                yield self.uploader.adopt(data)


def _torch_dtype(array: np.ndarray) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=array.dtype)).dtype
