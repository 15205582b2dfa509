"""Seeds -> sample -> features -> PyG `Data` mini-batches on the rank's device; the first module that imports
torch-geometric. Every rank yields the same number of batches per epoch, so DDP and the exchanges never wait on
a rank that has stopped.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import numpy as np
import torch
from torch_geometric.data import Data

from mpignn.launch.device import EventSpans, Uploader, pinned_empty, synchronize
from mpignn.exchange.features import FeatureStore
from mpignn.exchange.halo import Halo
from mpignn.loader.whole import WholeNeighbourhoods, sparse_input
from mpignn.mpi import chunk_bounds, pad_to_steps, steps_per_epoch
from mpignn.mpi.watchdog import bounded
from mpignn.sampling import kernels, labor
from mpignn.sampling.cooperative import union_rows
from mpignn.sampling.neighbor import NeighborSampler, SampleOutput, loop_free_degree

__all__ = ["BatchLoader", "NodeSeeds", "LoaderTimes", "cut_steps"]


class NodeSeeds:
    """Seeds that are node ids; with `positions` (places in the user's input list) batches carry `input_id`."""

    def __init__(self, ids: np.ndarray, positions: np.ndarray | None = None) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        self.positions = positions

    def __len__(self) -> int:
        return len(self.ids)

    def new_pass(self, pass_seed: int) -> None:
        """Nothing per pass: a node's draws come from the batch's seed alone."""

    def draw(self, sampler: NeighborSampler, items: np.ndarray, seed: int,
             variates: tuple[int, int] | None = None) -> SampleOutput:
        """The sample around seeds `items` (positions in `ids`)."""
        out = sampler.sample(self.ids[items], seed, variates)
        if self.positions is not None:
            out.metadata = {"input_id": self.positions[items]}
        return out


class LoaderTimes:
    """Seconds producing batches by stage, and the consumer's wait (less than their sum with prefetch).
    Device-built batches are timed by events read only when a total is, so no batch waits to be timed."""

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.wait_s = 0.0
        self._host_s = [0.0, 0.0]  # sample, exchange (features from owners and cache, the copy to the device)
        self._spans = (EventSpans(device), EventSpans(device))

    def mark(self) -> tuple[float, Any]:
        """Now, on the host clock and (on an accelerator) as an event on the current stream."""
        return time.perf_counter(), self._spans[0].event()

    def add(self, start: tuple[float, Any], drawn: tuple[float, Any], on_device: bool) -> None:
        """One batch: drawn between `start` and `drawn`, finished now; `on_device`: time it by its events."""
        end = self.mark()
        for stage, (a, b) in enumerate(((start, drawn), (drawn, end))):
            if on_device and b[1] is not None:
                self._spans[stage].add(a[1], b[1])
            else:
                self._host_s[stage] += b[0] - a[0]

    @property
    def sample_s(self) -> float:
        return self._host_s[0] + self._spans[0].seconds

    @property
    def exchange_s(self) -> float:
        return self._host_s[1] + self._spans[1].seconds


class BatchLoader:
    """Iterate over mini-batches sampled around `seeds`; each pass is a new epoch unless `set_epoch` names one.

    Args:
        seeds: global ids this rank uses, or a task's seed source (`__len__`, `new_pass`, `draw`).
        comm: agrees the step count (collective, in the constructor); required when anything talks to others.
        prefetch: build the next batch in a thread; talking samplers need a communicator of their own and
            MPI_THREAD_MULTIPLE (`prefetch.overlap` decides).
        wrap: repeat seeds so every DDP step has data (training); without it surplus steps are empty.
        max_steps: at most this many steps per epoch (0: all), the same cap on every rank.
        layout: a `loader.hetero.HeteroLayout`: batches are then PyG `HeteroData`.
        reuse: full-graph batches, made on the first pass and kept (every draw is the same).
        dataset_ids: a `FeatureStore` of each node's dataset id (and label): batches carry `n_id` in those ids
            and `part_n_id` in the partition's (collective like the features).
        name: the loader in the watchdog's messages.
        seed_type: heterogeneous graphs: the seeds' node type, or the seed edges' type tuple.
    """

    def __init__(self, sampler: NeighborSampler, features: FeatureStore, seeds: np.ndarray, batch_size: int, *,
                 shuffle: bool = True, drop_last: bool = False, seed: int = 0, comm: Any = None,
                 device: str | torch.device = "cpu", prefetch: bool = False, wrap: bool = True,
                 max_steps: int = 0, layout: Any = None, dataset_ids: FeatureStore | None = None,
                 reuse: bool = False, name: str = "a BatchLoader", seed_type: Any = None) -> None:
        self.sampler, self.features = sampler, features
        self.source = NodeSeeds(seeds) if isinstance(seeds, (np.ndarray, list, tuple)) else seeds
        self.seeds = np.arange(len(self.source), dtype=np.int64)  # items: positions in the source
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.seed, self.device, self.prefetch, self.wrap = seed, torch.device(device), prefetch, wrap
        self.layout, self.dataset_ids, self.name, self.seed_type = layout, dataset_ids, name, seed_type
        self.reuse, self._kept = reuse, {}  # reuse: step -> its batch, made on the first pass
        self.rank = comm.rank if comm is not None else 0
        self.steps = steps_per_epoch(comm, len(self.seeds), batch_size, drop_last)
        self.capped = 0 < max_steps < self.steps
        if self.capped:
            self.steps = max_steps
        self.epoch, self.start_step, self.end_step = 0, 0, None
        self._named, self._passes = False, 0  # whether set_epoch named the next pass; passes begun
        self.times = LoaderTimes(self.device)
        self.uploader = Uploader(self.device)

    def __len__(self) -> int:
        return self.steps

    @property
    def minibatch(self) -> str:
        """How the batches split the work over ranks: full, cooperative or independent."""
        return "full" if self.reuse else "cooperative" if self.sampler.cooperative else "independent"

    def set_epoch(self, epoch: int, start_step: int = 0, end_step: int | None = None) -> None:
        """Use epoch `epoch`'s shuffle and streams for the next pass (as DistributedSampler), yielding its steps
        [start_step, end_step) as a whole pass would (a run resumed or evaluated mid-epoch)."""
        self.epoch, self.start_step, self.end_step = epoch, start_step, end_step
        self._named = True

    def _next_pass(self) -> None:
        if self._passes and not self._named:
            self.epoch, self.start_step, self.end_step = self.epoch + 1, 0, None
        self._named, self._passes = False, self._passes + 1

    def _batches(self) -> list[np.ndarray]:
        seeds = self.seeds
        if self.shuffle:
            rng = np.random.default_rng([self.seed, self.epoch, self.rank])
            seeds = seeds[rng.permutation(len(seeds))]
        if self.capped:
            seeds = seeds[:self.steps * self.batch_size]
        return cut_steps(seeds, self.steps, self.batch_size, self.drop_last, self.wrap)

    def _make(self, step: int, seeds: np.ndarray) -> Data:
        # a collective: marked by loader and step, so a rank in another loader or step is named (watchdog)
        with bounded(f"{self.name}: epoch {self.epoch} step {step}"):
            return self._build(step, seeds)

    def _build(self, step: int, seeds: np.ndarray) -> Data:
        t0 = self.times.mark()
        cooperative = self.sampler.cooperative  # one batch of all ranks: one random stream
        stream = (0 if cooperative else self.rank) * 1_000_003
        epoch_seed = kernels.mix_seed(self.seed, self.epoch)
        dependency = self.sampler.dependency if self.wrap else 1  # training loaders only
        variates = None
        if dependency > 1:  # labor: the window's seed, the step's shift
            window, shift = labor.window(step, dependency)
            variates = (kernels.mix_seed(kernels.mix_seed(epoch_seed, stream + window), dependency), shift)
        out = self.source.draw(self.sampler, seeds, kernels.mix_seed(epoch_seed, stream + step), variates)
        # mean_over: layer-neighbour batches' divisor of each target's mean; edge_weight: LABOR-i's importance
        optional = {k: getattr(out, k) for k in ("edge_label_index", "edge_label", "mean_over", "edge_weight")}
        extras: dict[str, Any] = {**out.metadata, **{k: v for k, v in optional.items() if v is not None}}
        if cooperative:
            extras["halo"] = Halo(out.halo, self.sampler.rows, self.sampler, static_input=self.reuse,
                                  keeper=self.sampler if self.sampler.keep_inputs else None)
        elif self.wrap and step == self.start_step and self.sampler.source.comm is not None:
            # independent batches' overlap, once a pass (a collective of ids per layer): `redundancy`
            hops = self.sampler.source
            extras["union_rows"] = union_rows(hops.comm, hops.part_offsets, out.n_id, out.num_sampled_nodes)
        t1 = self.times.mark()
        resident = isinstance(out.n_id, torch.Tensor)  # drawn and relabelled on the device (`DeviceSampler`)
        buffer = None
        if self.features.on_host and self.device.type != "cpu" and not resident:
            dtype = torch.from_numpy(np.empty(0, dtype=self.features.x.dtype)).dtype
            rows = pinned_empty((len(out.n_id), self.features.num_features), dtype, self.device)
            buffer = rows.numpy()
        elif cooperative and self.features.on_host:  # room for the rows other ranks send: the halo fills it
            rows = torch.from_numpy(np.empty((extras["halo"].table_rows(0), self.features.num_features),
                                             dtype=self.features.x.dtype))
            buffer = rows.numpy()[:len(out.n_id)]
        x, y = self.features.gather(out.n_id, out=buffer)
        ids = None
        if self.dataset_ids is not None:  # collective like the features, right after them
            stored = self.dataset_ids.gather(out.n_id)[0]
            ids = stored[:, 0]
            if stored.shape[1] > 1:  # every node's label, remote ones too (the features' store has its own only)
                y = stored[:, 1].astype(y.dtype, copy=False)
        x = rows if buffer is not None else _tensor(x)
        if x.dtype == torch.uint16:  # a bf16 feature table holds bfloat16 bits (data.features)
            x = x.view(torch.bfloat16)
        if self.layout is not None:  # heterogeneous: cut by type into PyG's HeteroData
            data = self.layout.split(x, torch.from_numpy(y), out.n_id, out.row, out.col, out.edge_type,
                                     out.num_sampled_nodes, out.num_sampled_edges, out.batch_size,
                                     device=self.device, dataset_ids=ids,
                                     seed_type=-1 if isinstance(self.seed_type, tuple) else self.seed_type)
            self._place_seed_fields(data, extras, out.n_id)
            return self._finish(_carry(data, extras), x, t0, t1)
        if resident:
            edge_index = torch.stack([out.row, out.col])
        else:
            edge_index = pinned_empty((2, len(out.row)), torch.int64, self.device)
            edge_index[0].numpy()[:], edge_index[1].numpy()[:] = out.row, out.col
        data = Data(x=x, y=_tensor(y), edge_index=edge_index, n_id=_tensor(out.n_id))
        if self.dataset_ids is not None:  # its sources give `input_id` too (`_carry`)
            data.part_n_id = data.n_id
            data.n_id = torch.from_numpy(ids)
        data.num_nodes = len(out.n_id)  # a cooperative x may have room for other ranks' rows after them
        data.batch_size = out.batch_size
        data.num_sampled_nodes = out.num_sampled_nodes
        data.num_sampled_edges = out.num_sampled_edges
        data.in_degree = _tensor(out.in_degree)  # the model's CSR pointers: no bincount on the device
        if self.reuse:  # whole neighbourhoods: each row's whole-graph degree, the input rows' CSR where sparse
            sparse = sparse_input(x[:len(out.n_id)], self.sampler.comm if cooperative else None)
            n_id = out.n_id.cpu().numpy() if resident else out.n_id  # read once: the batch is kept
            hops = self.sampler.source.local  # a full batch holds own rows only: their loop-free in-degrees
            degree = loop_free_degree(hops.rowptr, hops.col, hops.lo)[n_id - hops.lo].astype(np.float32)
            data.whole = WholeNeighbourhoods(torch.from_numpy(degree).to(x.device), sparse)
        data = _carry(data, extras)
        return self._finish(data, x, t0, t1, resident=resident and not self.features.on_host)

    def _place_seed_fields(self, data: Any, extras: dict[str, Any], n_id: np.ndarray) -> None:
        """Heterogeneous batches: the seeds' fields on the stores where PyG's loaders put them."""
        if not isinstance(self.seed_type, tuple):
            if "input_id" in extras:
                data[self.layout.seed_store(self.seed_type)].input_id = torch.from_numpy(extras.pop("input_id"))
            return
        edge, local = self.seed_type, self.layout.local_ids(n_id)
        data.input_type = edge
        stores = {"edge_label_index": edge, "src_index": edge[0], "dst_pos_index": edge[-1],
                  "dst_neg_index": edge[-1]}  # where PyG's LinkLoader puts them
        for key, where in stores.items():
            if key in extras:
                data[where][key] = torch.from_numpy(local[extras.pop(key)])
        for key in ("edge_label", "input_id"):
            if key in extras:
                data[edge][key] = torch.from_numpy(np.asarray(extras.pop(key)))

    def _finish(self, data: Any, x: torch.Tensor, t0: tuple[float, Any], t1: tuple[float, Any],
                resident: bool = False) -> Any:
        """`resident`: built on the device; the task's extras join it there and nothing is uploaded."""
        data = self.uploader.upload(data.to(x.device) if resident else data, resident=resident)
        if not self.features.on_host and not resident:
            synchronize(x.device)  # a device exchange is queued work until here
        self.times.add(t0, t1, on_device=resident)
        return data

    def __iter__(self) -> Iterator[Data]:
        self._next_pass()
        self.sampler.new_pass()  # cooperative batches that keep input rows: see CooperativeSampler
        self.source.new_pass(kernels.mix_seed(self.seed, self.epoch))  # draws keyed by the pass (link negatives)
        batches = self._batches()[:self.end_step]
        self.times = LoaderTimes(self.device)
        first = min(self.start_step, len(batches))
        ahead = self.prefetch and not self.reuse and len(batches) - first > 1  # batch k+1 made while k computes
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mpignn-loader") as pool:  # no thread unless ahead
            pending = pool.submit(self._make, first, batches[first]) if ahead else None
            for step in range(first, len(batches)):
                t0 = time.perf_counter()
                data = self._kept.get(step)  # full-graph batches (`reuse`): made on the first pass, then kept
                if data is None:
                    data = pending.result() if ahead else self._make(step, batches[step])
                if self.reuse:
                    self._kept[step] = data
                self.times.wait_s += time.perf_counter() - t0
                if ahead and step + 1 < len(batches):
                    pending = pool.submit(self._make, step + 1, batches[step + 1])
                yield data if self.reuse else self.uploader.adopt(data)


def cut_steps(items: np.ndarray, steps: int, batch_size: int, drop_last: bool, wrap: bool) -> list[np.ndarray]:
    """`items` in exactly `steps` batches: `pad_to_steps` with `wrap` or `drop_last`, else spread evenly, each
    item once."""
    if wrap or drop_last:
        return pad_to_steps(items, steps, batch_size, drop_last)
    return [items[a:b] for a, b in (chunk_bounds(len(items), steps, i) for i in range(steps))]


def _carry(data: Any, extras: dict[str, Any]) -> Any:
    for key, value in extras.items():
        setattr(data, key, torch.from_numpy(value) if isinstance(value, np.ndarray) else value)
    return data


def _tensor(a: Any) -> torch.Tensor:
    """A host tensor over the array's memory; not `torch.as_tensor`, which a user's `torch.set_default_device`
    would send to the GPU field by field."""
    return a if isinstance(a, torch.Tensor) else torch.from_numpy(a)
