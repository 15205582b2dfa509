"""The Python API for your own training loop: bootstrap, load this rank's part, build loaders, reduce metrics.

`python -m mpignn.train` is built on these functions. Each one that talks to other ranks says so.

    rt = bootstrap()                                   # MPI topology, threads, device, torch.distributed
    graph = load_local_graph(rt, "synthetic")          # rank 0 prepares + partitions; each rank loads its part
    # or: build_local_graph(rt, GraphOptions.from_config(cfg, task), task), as python -m mpignn.train does;
    # load_local_graph(rt, "Cora", task=LinkTask()) for link prediction (mpignn.tasks)
    loader = make_loader(rt, graph, "train", [15, 10, 5], batch_size=1024)   # graph.task's seeds of the split
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader: ...                       # PyG Data on rt.device, seeds first
    totals = reduce_sums(rt, {"correct": c, "total": n})
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mpignn.launch import process_group as dist
from mpignn.launch.allocator import tune_allocator
from mpignn.exchange.cache_policy import build_cache, cache_budget
from mpignn.config.choices import MINIBATCH_MODES
from mpignn.data import check_known, dataset_key
from mpignn.data.features import transform_rows
from mpignn.data.hetero import HeteroSchema, hop_fanouts
from mpignn.env import bound_onednn_cache, thread_budget
from mpignn.errors import ConfigError, LaunchError, MpignnError, mark_agreed
from mpignn.exchange.alltoall import make_alltoall
from mpignn.exchange.embedding import NodeEmbedding
from mpignn.exchange.features import FeatureStore
from mpignn.config.graph_options import GraphOptions
from mpignn.loader.hetero import HeteroLayout
from mpignn.loader.batches import BatchLoader
from mpignn.log import setup_logging
from mpignn.mpi import (Topology, allreduce_max, allreduce_sum, check_all, check_launcher, chunk_bounds,
                        root_first, topology, world)
from mpignn.partition.source import auto_folder, ensure_partition, load_part  # auto_folder: re-exported
from mpignn.partition import LocalPart
from mpignn.tasks import Task, make_task, picker
from mpignn.loader.prefetch import overlap, rows_on_device
from mpignn.training.report import peak_rss_mb
from mpignn.sampling import kernels
from mpignn.sampling.cooperative import CooperativeSampler
from mpignn.sampling.distributed import DistributedHops
from mpignn.sampling.neighbor import LocalHops, NeighborSampler

__all__ = ["Runtime", "LocalGraph", "GraphOptions", "bootstrap", "load_local_graph", "build_local_graph",
           "attach_embedding", "make_loader", "reduce_sums", "shutdown", "rank_batch_size", "overlap", "cache_budget",
           "auto_folder", "cooperative_refusal"]

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
              comm: Any = None, tune_process: bool = False, collective_timeout: float = 600.0) -> Runtime:
    """Collective over COMM_WORLD (or `comm`): topology, logging, thread budget, device, torch.distributed.

    Args:
        tune_process: also apply mpignn's process-wide tuning, as `python -m mpignn.train` does: glibc's
            malloc keeps freed heap memory and mmaps blocks of 256 KiB and more (`allocator.tune_allocator`:
            fast steps, a flat peak over many epochs) and oneDNN's primitive
            cache is capped (`env.bound_onednn_cache`). Off by default: both change the whole process, the
            rest of your program included. Turn it on before any torch compute runs.
        collective_timeout: seconds a torch.distributed collective may wait (the process group's timeout).
    Raises:
        LaunchError: on every rank alike, when the device or backend is not there, or when the wrong `mpirun`
            started the job (MPI sees one process while the launcher started several).
    """
    check_launcher()
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
    if tune_process:
        tune_allocator()
        bound_onednn_cache()
    error, kind = "", LaunchError
    choice = dist.Choice("cpu", "gloo")
    hw = dist.detect_hardware()
    # which devices each rank sees, by identity (one allgather at start-up): ranks that each see one GPU
    # (srun --gpus-per-task=1, a per-rank CUDA_VISIBLE_DEVICES) do not share it
    seen = comm.allgather((topo.host_rank, dist.visible_devices(device, hw) if device in dist.DEVICES else ()))
    peers = [ids for host, ids in seen if host == topo.host_rank]  # in local-rank order (topology's split key)
    try:
        choice = dist.choose(device, backend, hw, topo.local_rank, topo.local_size, peers)
    except MpignnError as exc:
        error, kind = str(exc), type(exc)
    check_all(comm, not error, error, kind)
    if topo.world_size > 1:
        dist.init_process_group(comm, topo.rank, topo.world_size, topo.local_rank, topo.local_size, choice,
                                timeout_s=collective_timeout)
    log.info("%d ranks on %d hosts, %d threads each, device %s, backend %s", topo.world_size, topo.num_hosts,
             threads, choice.device, choice.backend)
    return Runtime(comm=comm, topo=topo, choice=choice, threads=threads)


@dataclass(frozen=True)
class LocalGraph:
    """This rank's part and the sampler and feature store built on it (`attach_embedding` returns a new one)."""

    part: LocalPart
    sampler: NeighborSampler
    features: FeatureStore
    replicated: bool
    folder: Path
    load_peak_rss_mb: float = 0.0  # this rank's peak memory by the end of start-up (imports, part, cache)
    cache_rows: int = 0  # remote feature rows cached, the most on any rank
    cache_mib: float = 0.0  # their MiB, the most on any rank
    graph_mib: float = 0.0  # memory that depends on the graph (part arrays, one sampling thread's id map, cache)
    task: Task | None = None  # what the loaders' seeds and the model's head are for (`tasks`)
    task_data: dict | None = None  # this rank's arrays of the task (`Task.local_data`: e.g. held-out edges)
    embedding: NodeEmbedding | None = None  # learnable rows of this rank's nodes (`attach_embedding`)
    layout: HeteroLayout | None = None  # heterogeneous graphs: how batches are cut by type (HeteroData)

    @property
    def schema(self) -> HeteroSchema | None:
        return self.layout.schema if self.layout is not None else None

    def in_channels(self) -> int | dict[str, int]:
        """A model's input width: `num_features`, or per node type on a heterogeneous graph (its features;
        a featureless type its learnable rows, or the constant 1-column input without them)."""
        if self.layout is None:
            return self.num_features
        emb = self.embedding.dim if self.embedding is not None else 1
        return {t: d or emb for t, d in zip(self.schema.node_types, self.schema.feature_dims)}

    @property
    def num_classes(self) -> int:
        return self.part.meta.num_classes

    @property
    def num_features(self) -> int:
        """Numbers per node a batch carries: the features, then the learnable rows if any."""
        return self.part.meta.num_features + (self.embedding.dim if self.embedding is not None else 0)


def load_local_graph(rt: Runtime, dataset: str, root: str = "data", task: Task | None = None,
                     **options: Any) -> LocalGraph:
    """Collective over `rt.comm`: `build_local_graph` for `task` (default node classification) with
    `GraphOptions(dataset=..., root=..., links=task.partition_extras(), **options)`.

    The keyword arguments are `GraphOptions`' fields: partitions, method, replicated, seed, fanouts,
    cache_size, local_prep, prep_timeout, exchange, feature_norm, feature_dtype, edge_fanouts, force.

    Raises:
        ConfigError: an unknown keyword or a value `GraphOptions` refuses (on every rank alike).
    """
    task = task or make_task()
    try:
        opts = GraphOptions(dataset=dataset, root=root, links=task.partition_extras(), **options)
    except TypeError as exc:  # an unknown keyword: the same call on every rank
        raise mark_agreed(ConfigError(f"expected GraphOptions fields as keywords; got {exc}. HINT: see "
                                      "mpignn.config.graph_options.GraphOptions")) from None
    except MpignnError as exc:
        raise mark_agreed(exc) from None
    return build_local_graph(rt, opts, task)


def build_local_graph(rt: Runtime, opts: GraphOptions, task: Task | None = None) -> LocalGraph:
    """Collective over `rt.comm`: make sure a partition exists, load this rank's part, and build its sampler,
    feature store and cache as `opts` says, for `task` (default node classification; `opts.links` must be
    its `partition_extras()`, as `GraphOptions.from_config(cfg, task)` makes them).

    Without `opts.partitions`, rank 0 (of each host with `local_prep`) prepares and partitions the dataset
    once under `root/mpignn-parts/` (`auto_folder`), holding out what the task asks first (`opts.links`:
    edges, for link prediction); a host that does not see the folder receives it (`deliver_partition`). Each rank's own
    feature rows are transformed after loading (`data.features.transform_rows`), so fetched and cached rows
    arrive transformed. A heterogeneous graph samples each edge type with its own fanout (`edge_fanouts`) and
    its loaders give `HeteroData` batches.

    Raises:
        PartitionFormatError / DatasetError / ConfigError: on every rank alike.
    """
    task = task or make_task()
    try:
        check_known(opts.dataset)  # the same name fails the same way on every rank: no collective needed
        key = dataset_key(opts.dataset)
        if opts.links != task.partition_extras():
            raise ConfigError(f"GraphOptions.links {opts.links} differ from what the {task.name} task holds out "
                              f"({task.partition_extras()}). HINT: GraphOptions.from_config(cfg, task)")
    except MpignnError as exc:
        raise mark_agreed(exc) from None
    part_id = 0 if opts.replicated else rt.rank
    folder = ensure_partition(rt, opts, key, part_id)
    # numba writes its on-disk cache when it compiles: one rank per host compiles, the others then load.
    with root_first(rt.comm, per_host=True, timeout=opts.prep_timeout, what="compiling the sampling kernels"):
        kernels.warm_up()
    part, held_out = load_part(rt.comm, folder, part_id, opts.link_params)
    part.x = transform_rows(part.x, opts.feature_norm, opts.feature_dtype)
    meta = part.meta
    schema = HeteroSchema.from_json(meta.hetero) if meta.hetero else None
    try:
        fanouts = hop_fanouts(opts.fanouts, opts.edge_fanouts, schema)
        task.check_graph(schema)
    except MpignnError as exc:
        raise mark_agreed(exc) from None
    local = LocalHops(part.rowptr, part.col, part.lo, part.type_rowptr, schema.num_etypes if schema else 1)
    alone = opts.replicated or rt.world_size == 1
    source, features = _sources(rt, opts, part, local, alone)
    sampler = NeighborSampler(source, meta.num_nodes, fanouts)
    cache_rows, cache_mib = 0, 0.0
    if not alone and opts.cache_size != 0:
        cache_rows, cache_mib = build_cache(rt, local, part, fanouts, features, opts.cache_size,
                                           task.cache_seeds(part))
    graph_bytes = part.training_bytes + sampler.scratch_bytes + features.cache_bytes
    graph_mib = allreduce_max(rt.comm, [graph_bytes / 2**20])[0]
    return LocalGraph(part=part, sampler=sampler, features=features, replicated=opts.replicated, folder=folder,
                      load_peak_rss_mb=peak_rss_mb(), cache_rows=cache_rows, cache_mib=cache_mib,
                      graph_mib=float(graph_mib), task=task,
                      task_data=task.local_data(part, held_out),
                      layout=HeteroLayout(schema, *meta.type_blocks()) if schema is not None else None)


def _sources(rt: Runtime, opts: GraphOptions, part: LocalPart, local: LocalHops,
             alone: bool) -> tuple[Any, FeatureStore]:
    """(what the sampler reads neighbours from, the feature store): this rank's part alone, or, across parts,
    both on a communicator of their own (collective over `rt.comm`: `Dup`), so a loader thread can sample and
    exchange while the training thread all-reduces gradients on `rt.comm`."""
    if alone:
        return local, FeatureStore(part.x, part.y, part.lo)
    offsets = np.asarray(part.meta.part_offsets)
    data_comm = rt.comm.Dup()
    transport = make_alltoall(opts.exchange, data_comm, rt.device)
    table = part.x if opts.exchange != "torch" else _device_table(part.x, rt.device)
    return (DistributedHops(data_comm, local, offsets),
            FeatureStore(table, part.y, part.lo, offsets, data_comm, transport))


def attach_embedding(rt: Runtime, graph: LocalGraph, dim: int, *, lr: float = 0.1, seed: int = 0) -> LocalGraph:
    """Collective over `rt.comm`: `graph` with every node given `dim` learnable numbers, held by its owner
    (this rank's rows: its part), on a communicator of their own; batches then carry them after the features
    (`mpignn.training.epoch` pulls them and steps them). Returns a new LocalGraph; `graph` itself is left as it was.
    Not for a replicated graph (no owners)."""
    if graph.replicated and rt.world_size > 1:
        raise mark_agreed(ConfigError("learnable rows need owners; a replicated graph has none. HINT: "
                                      "partitioned training (no --replicated)"))
    part = graph.part
    comm = rt.comm.Dup() if rt.world_size > 1 else None
    embedding = NodeEmbedding(part.hi - part.lo, dim, lo=part.lo, part_offsets=np.asarray(part.meta.part_offsets),
                              comm=comm, lr=lr, seed=seed)
    held = embedding.weight.nbytes + sum(a.nbytes for a in embedding.optimizer.state().values())
    graph_mib = graph.graph_mib + float(allreduce_max(rt.comm, [held / 2**20])[0])
    return replace(graph, embedding=embedding, graph_mib=graph_mib)


def _device_table(x: np.ndarray, device: str) -> Any:
    """The rank's feature rows as a tensor on `device` (a view of the array on CPU), for `--exchange torch`."""
    import torch

    if not x.flags.writeable:  # a memory-mapped part: torch wants writable memory to wrap
        x = np.array(x)
    table = torch.from_numpy(x)
    if x.dtype == np.uint16:  # bfloat16 bits (data.features)
        table = table.view(torch.bfloat16)
    return table.to(device)


def make_loader(rt: Runtime, graph: LocalGraph, split: str, fanouts: Sequence[int] | None = None, *,
                batch_size: int = 1024, batch_scope: str = "global", shuffle: bool | None = None, seed: int = 0,
                prefetch: str = "auto", max_steps: int = 0, minibatch: str = "independent") -> BatchLoader:
    """Collective over `rt.comm` (agrees on the step count): a loader over this rank's seeds of `split`
    ("train", "val" or "test") as `graph.task` gives them (`Task.seeds`: the split's nodes; for link
    prediction its pairs, and batches then carry `edge_label_index` and `edge_label`, as PyG's
    LinkNeighborLoader gives); in replicated mode each rank takes a ceiling-division share of them.

    Args:
        batch_size: seeds (nodes, or positive pairs) per step; for "train" with `batch_scope="global"` the
            global batch, of which this rank takes its ceiling-division share (`rank_batch_size`); per rank
            otherwise. Evaluation steps hold `Task.eval_batch_size` seeds (held-out pairs each bring 1 + K
            negatives, so their batches hold fewer positives).
        prefetch: auto, on or off: produce batch k+1 in a thread while batch k computes; see `overlap`.
        max_steps: for "train", at most this many steps per epoch (0: all), each epoch from a fresh shuffle.
        minibatch: for "train" on several parts, "cooperative": the ranks sample one batch together and each
            sampled node is computed by its owner only (`sampling.cooperative`); "independent": each rank
            samples and computes its share's neighbourhoods. Evaluation is independent.
    """
    task = graph.task or make_task()
    if minibatch not in MINIBATCH_MODES:  # the same argument on every rank ("auto" is the caller's to resolve)
        raise mark_agreed(ConfigError(f"minibatch must be one of {', '.join(MINIBATCH_MODES)}; got {minibatch!r}. "
                                      "HINT: minibatch='independent'"))
    seeds = task.seeds(graph, split, picker(graph.replicated, rt.world_size, rt.rank))
    train = split == "train"
    if not train:
        batch_size = task.eval_batch_size(seeds, batch_size)
    sampler = graph.sampler
    if fanouts is not None and list(fanouts) != sampler.fanouts:
        sampler = NeighborSampler(sampler.source, sampler.num_nodes, fanouts)
    talks = rt.world_size > 1 and not graph.replicated
    if train:
        batch_size = rank_batch_size(batch_size, rt.world_size, rt.rank, batch_scope)
        if minibatch == "cooperative" and talks:
            sampler = _cooperative_sampler(rt, graph, sampler.fanouts)
    return BatchLoader(sampler, graph.features, seeds, batch_size, shuffle=train if shuffle is None else shuffle,
                       seed=seed, comm=rt.comm, device=rt.device,
                       prefetch=overlap(rt, talks, prefetch, device_exchange=rows_on_device(graph.features)),
                       wrap=train, max_steps=max_steps if train else 0, layout=graph.layout)


def cooperative_refusal(graph: LocalGraph) -> str:
    """Why cooperative mini-batches cannot train `graph` (a one-line error with its hint), or "" where they
    can. Not collective: every rank's graph is of the same kind."""
    try:
        graph.task.check_cooperative(graph)
    except ConfigError as exc:
        return str(exc)
    if graph.embedding is not None:
        return ("--minibatch cooperative does not carry learnable rows yet. HINT: --minibatch independent, or "
                "drop --embed-dim")
    return ""


def _cooperative_sampler(rt: Runtime, graph: LocalGraph, fanouts: Sequence[Any]) -> CooperativeSampler:
    """Collective over `rt.comm`: sampling on one communicator of its own (the loader thread's) and the layers'
    rows on another (the training thread's), by the transport the features take."""
    problem = cooperative_refusal(graph)
    if problem:
        raise mark_agreed(ConfigError(problem))
    local = graph.sampler.source.local
    rows = make_alltoall("torch" if rows_on_device(graph.features) else "mpi", rt.comm.Dup(), rt.device)
    return CooperativeSampler(rt.comm.Dup(), local, np.asarray(graph.part.meta.part_offsets), fanouts, rows)


def rank_batch_size(batch_size: int, world_size: int, rank: int, scope: str = "global") -> int:
    """This rank's training seeds per step: its ceiling-division share of a global `batch_size` (at least
    one seed), or `batch_size` itself with scope "rank"."""
    if scope == "rank":
        return batch_size
    start, stop = chunk_bounds(batch_size, world_size, rank)
    return max(1, stop - start)


def reduce_sums(rt: Runtime, values: dict[str, float]) -> dict[str, float]:
    """Collective over `rt.comm`: sum each value over the ranks (reduce sums, then divide; never average
    averages)."""
    keys = sorted(values)
    summed = allreduce_sum(rt.comm, [values[k] for k in keys])
    return dict(zip(keys, summed.tolist()))


def shutdown() -> None:
    """Tear down torch.distributed (MPI finalises itself at exit)."""
    dist.destroy_process_group()

