"""The Python API for your own training loop: bootstrap, load this rank's part, build loaders, reduce metrics.

`python -m mpignn.train` is built on these functions. Each one that talks to other ranks says so.

    rt = bootstrap()                                   # MPI topology, threads, device, torch.distributed
    graph = load_local_graph(rt, "synthetic")          # rank 0 prepares + partitions; each rank loads its part
    loader = make_loader(rt, graph, "train", [15, 10, 5], batch_size=1024)
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader: ...                       # PyG Data on rt.device, seeds first
    totals = reduce_sums(rt, {"correct": c, "total": n})
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mpignn import dist
from mpignn.data import check_known, dataset_key, load_dataset
from mpignn.env import bound_onednn_cache, thread_budget, tune_allocator
from mpignn.errors import LaunchError, MpignnError, PartitionFormatError, mark_agreed
from mpignn.exchange.alltoall import make_alltoall
from mpignn.exchange.features import FeatureStore
from mpignn.loader import NodeLoader
from mpignn.log import setup_logging
from mpignn.mpi import (Topology, allreduce_sum, ceil_split, check_all, pad_to_steps, root_first, steps_per_epoch,
                        topology, world)
from mpignn.partition import LocalPart, check_matches, load_partition, partition_graph, read_meta
from mpignn.report import peak_rss_mb
from mpignn.sampling import kernels
from mpignn.sampling.distributed import DistributedHops
from mpignn.sampling.neighbor import LocalHops, NeighborSampler

__all__ = ["Runtime", "LocalGraph", "bootstrap", "load_local_graph", "make_loader", "reduce_sums", "shutdown"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    """This rank's place in the job and what it computes on."""

    comm: Any
    topo: Topology
    choice: dist.Choice
    threads: int

    @property
    def device(self) -> str:
        return self.choice.device

    @property
    def rank(self) -> int:
        return self.topo.rank

    @property
    def world_size(self) -> int:
        return self.topo.world_size


def bootstrap(device: str = "auto", backend: str = "auto", threads: int = 0, *, logging_setup: bool = True,
              comm: Any = None) -> Runtime:
    """Collective over COMM_WORLD (or `comm`): topology, logging, thread budget, device, torch.distributed.

    Raises:
        LaunchError: on every rank alike, when the device or backend is not there.
    """
    comm = world() if comm is None else comm
    topo = topology(comm)
    if logging_setup:
        setup_logging(topo.rank, topo.world_size, topo.host)
    budget, oversubscribed = thread_budget(topo.local_size)
    if oversubscribed and topo.local_rank == 0:
        log.warning("%d ranks share %d cores on %s: oversubscribed, expect slow steps. HINT: fewer ranks per "
                    "host (mpirun -ppn) or more cores per task", topo.local_size, os.cpu_count(), topo.host)
    threads = threads or budget
    dist.apply_threads(threads)
    tune_allocator()
    bound_onednn_cache()
    error = ""
    choice = dist.Choice("cpu", "gloo")
    try:
        choice = dist.choose(device, backend, dist.detect_hardware(), topo.local_rank)
    except MpignnError as exc:
        error = str(exc)
    check_all(comm, not error, error, LaunchError)
    if topo.world_size > 1:
        dist.init_process_group(comm, topo.rank, topo.world_size, topo.local_rank, topo.local_size, choice)
    log.info("%d ranks on %d hosts, %d threads each, device %s, backend %s", topo.world_size, topo.num_hosts,
             threads, choice.device, choice.backend)
    return Runtime(comm=comm, topo=topo, choice=choice, threads=threads)


@dataclass
class LocalGraph:
    """This rank's part and the sampler and feature store built on it."""

    part: LocalPart
    sampler: NeighborSampler
    features: FeatureStore
    replicated: bool
    folder: Path
    load_peak_rss_mb: float = 0.0  # this rank's peak memory by the end of start-up (imports, part, cache)

    @property
    def num_classes(self) -> int:
        return self.part.meta.num_classes

    @property
    def num_features(self) -> int:
        return self.part.meta.num_features


def _auto_folder(root: str, key: str, method: str, num_parts: int, seed: int) -> Path:
    safe = key.replace("/", "_").replace(":", "_").replace(",", "_").replace("=", "")
    return Path(root) / "mpignn-parts" / f"{safe}-{method}-{num_parts}p-s{seed}"


def load_local_graph(rt: Runtime, dataset: str, root: str = "data", *, partitions: str = "",
                     method: str = "metis", replicated: bool = False, seed: int = 0, fanouts: Sequence[int] = (15,),
                     cache_size: int = 0, local_prep: bool = False, prep_timeout: float | None = None,
                     exchange: str = "auto") -> LocalGraph:
    """Collective over `rt.comm`: make sure a partition exists and load this rank's part.

    Without `partitions`, rank 0 (of each host with `local_prep`) prepares the dataset and partitions it into
    one part per rank (one part in total when `replicated`) under `root/mpignn-parts/`, once; later runs
    reuse it. With `partitions`, the folder must match the dataset and world size. `exchange` picks the
    feature transport: auto/mpi (MPI on host buffers) or torch (torch.distributed, e.g. NCCL).

    Raises:
        PartitionFormatError / DatasetError: on every rank alike.
    """
    comm = rt.comm
    try:
        check_known(dataset)  # the same name fails the same way on every rank: no collective needed
        key = dataset_key(dataset)
    except MpignnError as exc:
        raise mark_agreed(exc) from None
    num_parts = 1 if replicated else rt.world_size
    if partitions:
        folder = Path(partitions)
        problem = ""
        try:
            check_matches(read_meta(folder), folder, num_parts=num_parts, dataset=key)
        except MpignnError as exc:
            problem = str(exc)
        check_all(comm, not problem, problem, PartitionFormatError)
    else:
        folder = _auto_folder(root, key, method, num_parts, seed)
        with root_first(comm, per_host=local_prep, timeout=prep_timeout, what=f"preparing {dataset}") as first:
            if first and not (folder / "META.json").is_file():
                graph = load_dataset(dataset, root)
                rep = partition_graph(graph, num_parts, folder, method=method, seed=seed, dataset=key, force=True)
                log.info("partitioned %s into %d parts (%s): edge cut %.1f%%, %.1fs", key, num_parts, method,
                         rep["edge_cut_pct"], rep["seconds"])
                del graph
    # numba writes its on-disk cache when it compiles: one rank per host compiles, the others then load.
    with root_first(comm, per_host=True, timeout=prep_timeout, what="compiling the sampling kernels"):
        kernels.warm_up()
    part_id = 0 if replicated else rt.rank
    problem, part = "", None
    try:
        part = load_partition(folder, part_id)
    except MpignnError as exc:
        problem = str(exc)
    check_all(comm, not problem, problem, PartitionFormatError)
    meta = part.meta
    local = LocalHops(part.rowptr, part.col, part.lo)
    if replicated or rt.world_size == 1:
        source: Any = local
        features = FeatureStore(part.x, part.y, part.lo)
    else:
        source = DistributedHops(comm, local, np.asarray(meta.part_offsets))
        features = FeatureStore(part.x, part.y, part.lo, np.asarray(meta.part_offsets), comm,
                                make_alltoall(exchange, comm, rt.device))
    sampler = NeighborSampler(source, meta.num_nodes, fanouts)
    if not (replicated or rt.world_size == 1):
        probe = _probe_remote(comm, sampler, part, seed) if cache_size else None
        features.build_cache(part.halo_gid, part.halo_deg, cache_size, probe)
    return LocalGraph(part=part, sampler=sampler, features=features, replicated=replicated, folder=folder,
                      load_peak_rss_mb=peak_rss_mb())


def _probe_remote(comm: Any, sampler: NeighborSampler, part: LocalPart, seed: int, batches: int = 8,
                  batch_size: int = 1024) -> np.ndarray:
    """Collective over `comm`: sample a few real training batches and return the remote ids they reach
    (with repeats), so the cache holds what sampling actually asks for."""
    rng = np.random.default_rng([seed, 7919, comm.rank])
    seeds = part.train_idx[rng.permutation(len(part.train_idx))[:batches * batch_size]]
    steps = steps_per_epoch(comm, len(seeds), batch_size)
    remote = []
    for step, chunk in enumerate(pad_to_steps(seeds, steps, batch_size)):
        n_id = sampler.sample(chunk, kernels.mix_seed(seed + 7919, step)).n_id
        remote.append(n_id[(n_id < part.lo) | (n_id >= part.hi)])
    sampler.source.bytes_received = 0  # start-up traffic is not per-epoch traffic
    return np.concatenate(remote) if remote else np.empty(0, dtype=np.int64)


def make_loader(rt: Runtime, graph: LocalGraph, split: str, fanouts: Sequence[int] | None = None, *,
                batch_size: int = 1024, shuffle: bool | None = None, seed: int = 0) -> NodeLoader:
    """Collective over `rt.comm` (agrees on the step count): a loader over this rank's `split` nodes
    ("train", "val" or "test"); in replicated mode each rank takes a ceiling-division share of them."""
    seeds = getattr(graph.part, f"{split}_idx")
    if graph.replicated:
        seeds = np.asarray(ceil_split(seeds, rt.world_size, rt.rank))
    sampler = graph.sampler
    if fanouts is not None and list(fanouts) != sampler.fanouts:
        sampler = NeighborSampler(sampler.source, sampler.num_nodes, fanouts)
    talks = rt.world_size > 1 and not graph.replicated
    train = split == "train"
    return NodeLoader(sampler, graph.features, seeds, batch_size, shuffle=train if shuffle is None else shuffle,
                      seed=seed, comm=rt.comm, device=rt.device, prefetch=not talks, wrap=train)


def reduce_sums(rt: Runtime, values: dict[str, float]) -> dict[str, float]:
    """Collective over `rt.comm`: sum each value over the ranks (reduce sums, then divide; never average
    averages)."""
    keys = sorted(values)
    summed = allreduce_sum(rt.comm, [values[k] for k in keys])
    return dict(zip(keys, summed.tolist()))


def shutdown() -> None:
    """Tear down torch.distributed (MPI finalises itself at exit)."""
    dist.destroy_process_group()

