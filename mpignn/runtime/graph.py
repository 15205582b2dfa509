"""This rank's graph for the Python API: its part (from a partition folder, or rank 0's graph in memory), then
its sampler, feature store, cache and learnable rows."""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mpignn.config.graph_options import GraphOptions
from mpignn.config.refusals import check_combinations, refusal
from mpignn.config.train_config import TrainConfig
from mpignn.data import check_known, dataset_key
from mpignn.data.features import transform_rows
from mpignn.data.hetero import HeteroSchema, hop_fanouts
from mpignn.data.pyg import pyg_kind
from mpignn.errors import ConfigError, agreed, mark_agreed
from mpignn.exchange.alltoall import make_alltoall
from mpignn.exchange.cache_policy import build_cache
from mpignn.exchange.embedding import NodeEmbedding
from mpignn.exchange.features import FeatureStore
from mpignn.launch.allocator import peak_rss_mb
from mpignn.launch.bootstrap import Runtime
from mpignn.launch.device import features_on_device, free_memory
from mpignn.loader.hetero import HeteroLayout
from mpignn.loader.local_graph import LocalGraph
from mpignn.models import dropout
from mpignn.mpi import allreduce_max, check_all, root_first
from mpignn.partition import LocalPart
from mpignn.partition.memory import scatter_graph
from mpignn.partition.source import ensure_partition, load_part
from mpignn.sampling import kernels, labor
from mpignn.sampling.device_hops import DeviceHops
from mpignn.sampling.device_sampler import DeviceSampler, resident
from mpignn.sampling.distributed import DistributedHops
from mpignn.sampling.neighbor import LocalHops, NeighborSampler
from mpignn.tasks import Task, make_task

__all__ = ["load_local_graph", "build_local_graph", "attach_embedding", "build_graph_and_model"]

log = logging.getLogger("mpignn.train")

_MEMORY_REFUSED = ("root", "partitions", "local_prep", "force", "splits")
"""Keywords about files, meaningless for a graph in memory (its splits are its masks or id tensors)."""


def load_local_graph(rt: Runtime, dataset: Any, root: str | None = None, task: Task | None = None,
                     **options: Any) -> LocalGraph:
    """Collective over `rt.comm`: `build_local_graph` with `GraphOptions(dataset=..., root=..., **options)`.

    `dataset`: a name (the same on every rank), or a PyG graph on rank 0 and None elsewhere, partitioned in
    memory and sent over MPI, no file written. The keywords: docs/api.md.

    Raises:
        ConfigError: on every rank alike: a bad keyword or value, ranks passing different kinds of `dataset`,
            or a keyword about files with a graph in memory.
        DatasetError: the in-memory graph fails a check (`scatter_graph`), on every rank alike.
    """
    named = isinstance(dataset, str)
    with agreed():
        try:
            where = {"dataset": dataset, "root": TrainConfig.root if root is None else root} if named else {}
            opts = GraphOptions(**where, **options)
        except TypeError as exc:  # an unknown keyword: the same call on every rank
            raise ConfigError(f"expected GraphOptions fields as keywords; got {exc}. HINT: see "
                              "mpignn.config.graph_options.GraphOptions") from None
    _agree_on_source(rt.comm, dataset)
    if not named:
        given = {"root": root} if root is not None else {}
        given.update({k: options[k] for k in _MEMORY_REFUSED if k in options})
        if given:
            raise mark_agreed(ConfigError(
                f"expected no {', '.join(given)} with a graph held in memory (they are about files); got "
                f"{', '.join(f'{k}={v!r}' for k, v in given.items())}. HINT: drop them: rank 0 partitions the "
                "graph in memory and sends the parts"))
    return build_local_graph(rt, opts, task, data=None if named else dataset, in_memory=not named)


def _agree_on_source(comm: Any, dataset: Any) -> None:
    """Collective over `comm`: refuse on every rank unless all pass rank 0's name, or rank 0 a graph and the
    others None (or a graph, not read)."""
    mine = "name" if isinstance(dataset, str) else "None" if dataset is None else \
        pyg_kind(dataset) or type(dataset).__name__
    ours = comm.bcast({"kind": mine, "name": dataset if mine == "name" else None}, root=0)
    graphs = ("Data", "HeteroData")
    hint = ("HINT: pass a dataset name on every rank, or the graph (a torch_geometric Data or HeteroData) on rank 0 "
            "and None on the others")
    got = f"the name {dataset!r}" if mine == "name" else mine
    problem = ""
    if ours["kind"] not in ("name", *graphs):
        problem = (f"expected rank 0 to pass a dataset name or a torch_geometric Data/HeteroData; got "
                   f"{ours['kind']}. {hint}")
    elif ours["kind"] == "name" and (mine != "name" or dataset != ours["name"]):
        problem = f"expected the dataset name {ours['name']!r} that rank 0 passes; got {got}. {hint}"
    elif ours["kind"] in graphs and mine not in ("None", *graphs):
        problem = (f"expected None (rank 0 passes a {ours['kind']} held in memory); got {got}. {hint}")
    check_all(comm, not problem, problem, ConfigError)


def build_local_graph(rt: Runtime, opts: GraphOptions, task: Task | None = None, *, data: Any = None,
                      in_memory: bool = False) -> LocalGraph:
    """Collective over `rt.comm`: load this rank's part and build its sampler, feature store and cache per `opts`.

    Without `opts.partitions` the dataset is partitioned once under `root/mpignn-parts/`; a host that does not
    see the folder receives it. With `in_memory`, `data` is rank 0's PyG graph. Own feature rows are
    transformed on load, so fetched and cached rows arrive transformed. Its errors are agreed (every rank alike).
    """
    task = task or make_task()
    with agreed():
        if in_memory and opts.partitions:
            raise ConfigError(f"expected no partitions folder with a graph held in memory; got {opts.partitions!r}. "
                              "HINT: leave GraphOptions.partitions empty")
        if not in_memory:
            check_known(opts.dataset)  # the same name fails the same way on every rank: no collective needed
    part_id = 0 if opts.replicated else rt.rank
    part, held_out, folder = _part_source(rt, opts, part_id, data, in_memory, task.partition_extras())
    # numba writes its on-disk cache when it compiles: one rank per host compiles, the others then load.
    with root_first(rt.comm, per_host=True, timeout=opts.prep_timeout, what="compiling the numba kernels"):
        kernels.warm_up()
        if opts.sampler == "labor":
            labor.warm_up(importance=opts.labor_iterations > 0)
        if isinstance(opts, TrainConfig) and opts.dropout > 0 and torch.device(rt.device).type == "cpu":
            dropout.warm_up()  # SampledGNN's ReLU + dropout (elsewhere torch ops; a graph alone never loads them)
    part.x = transform_rows(part.x, opts.feature_norm, opts.feature_dtype)
    meta = part.meta
    schema = HeteroSchema.from_json(meta.hetero) if meta.hetero else None
    with agreed():
        fanouts = hop_fanouts(opts.fanouts, opts.edge_fanouts or None, schema)
        task.check_graph(schema)
        check_combinations({"sampler": opts.sampler, "hetero": schema is not None})
    num_etypes = schema.num_etypes if schema else 1
    if opts.sample_on == "device":  # `--sample-on auto` stays on the host until the device step is measured
        local = DeviceHops(part.rowptr, part.col, part.lo, part.type_rowptr, num_etypes, device=rt.device)
    else:
        local = LocalHops(part.rowptr, part.col, part.lo, part.type_rowptr, num_etypes)
    alone = opts.replicated or rt.world_size == 1
    source, features = _sources(rt, opts, part, local, alone)
    kind = DeviceSampler if resident(source, meta.num_nodes) else NeighborSampler
    if kind is DeviceSampler and rt.rank == 0:
        log.info("sampling: batches drawn and relabelled on the device (%s)", rt.device)
    sampler = kind(source, meta.num_nodes, fanouts, method=opts.sampler, dependency=opts.batch_dependency,
                   layer_dependency=opts.layer_dependency, iterations=opts.labor_iterations)
    features.keep_recent = opts.batch_dependency > 1 and not alone  # dependent batches overlap: keep their rows
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
                      layout=HeteroLayout(schema, *meta.type_blocks()) if schema is not None else None,
                      runtime=rt)


def _part_source(rt: Runtime, opts: GraphOptions, part_id: int, data: Any, in_memory: bool,
                 extras: dict | None) -> tuple[LocalPart, dict | None, Path | None]:
    """Collective over `rt.comm`: (part, held-out edges, folder or None), the one step where sources differ."""
    links = opts.link_params(extras)
    num_parts = 1 if opts.replicated else rt.world_size
    if in_memory:
        part, held_out = scatter_graph(rt.comm, data, part_id, num_parts=num_parts, method=opts.partition_method,
                                       seed=opts.seed, links=links, timeout=opts.prep_timeout)
        return part, held_out, None
    folder = ensure_partition(rt, opts, dataset_key(opts.dataset), part_id, links)
    part, held_out = load_part(rt.comm, folder, part_id, links)
    return part, held_out, folder


def _sources(rt: Runtime, opts: GraphOptions, part: LocalPart, local: LocalHops,
             alone: bool) -> tuple[Any, FeatureStore]:
    """Collective over `rt.comm` (`Dup`) across parts: sampling and features get a communicator of their own,
    so a loader thread can exchange while the training thread all-reduces on `rt.comm`."""
    parts = 1 if alone else part.meta.num_parts
    on_device = features_on_device(opts.feature_device, opts.exchange, rt.device, parts, part.x.nbytes,
                                   free_memory(rt.device), rt.choice.shared_by)
    table = _device_table(part.x, rt.device) if on_device else part.x
    if rt.rank == 0:
        log.info("features: %.1f MiB per rank on the %s (--feature-device %s)", part.x.nbytes / 2**20,
                 f"device ({rt.device})" if on_device else "host", opts.feature_device)
    if alone:
        return local, FeatureStore(table, part.y, part.lo)
    offsets = np.asarray(part.meta.part_offsets)
    data_comm = rt.comm.Dup()
    # a table on the device: its rows by NCCL/xccl, or with --exchange mpi through host buffers
    transport = make_alltoall("torch" if on_device and opts.exchange == "auto" else opts.exchange, data_comm,
                              rt.device)
    return (DistributedHops(data_comm, local, offsets),
            FeatureStore(table, part.y, part.lo, offsets, data_comm, transport))


def attach_embedding(rt: Runtime, graph: LocalGraph, dim: int, *, lr: float = TrainConfig.embed_lr,
                     seed: int = TrainConfig.seed) -> LocalGraph:
    """Collective over `rt.comm`: return a new `graph` whose nodes carry `dim` learnable numbers after their
    features, each held by its owner. Not for a replicated graph (no owners)."""
    if rt.world_size > 1:
        problem = refusal({"embed_dim": dim, "replicated": graph.replicated})
        if problem:
            raise mark_agreed(ConfigError(problem))
    part = graph.part
    comm = rt.comm.Dup() if rt.world_size > 1 else None
    embedding = NodeEmbedding(part.hi - part.lo, dim, lo=part.lo, part_offsets=np.asarray(part.meta.part_offsets),
                              comm=comm, lr=lr, seed=seed)
    held = embedding.weight.nbytes + sum(a.nbytes for a in embedding.optimizer.state().values())
    graph_mib = graph.graph_mib + float(allreduce_max(rt.comm, [held / 2**20])[0])
    return replace(graph, embedding=embedding, graph_mib=graph_mib)


def _device_table(x: np.ndarray, device: str) -> Any:
    if not x.flags.writeable:  # a memory-mapped part: torch wants writable memory to wrap
        x = np.array(x)
    table = torch.from_numpy(x)
    if x.dtype == np.uint16:  # bfloat16 bits (data.features)
        table = table.view(torch.bfloat16)
    return table.to(device)


def build_graph_and_model(rt: Runtime, cfg: TrainConfig, task: Task) -> tuple[LocalGraph, torch.nn.Module]:
    """Collective over `rt.comm`: build the graph, its learnable rows and the task's model on `rt.device` (the
    same whatever --minibatch mode trains it), as training and predict both start; a model the graph's kind
    cannot take is an agreed ConfigError."""
    graph = build_local_graph(rt, cfg, task)
    if cfg.embed_dim:
        graph = attach_embedding(rt, graph, cfg.embed_dim, lr=cfg.embed_lr, seed=cfg.seed)
    with agreed(ConfigError):  # the graph's kind decides, the same on every rank
        return graph, task.build_model(cfg.model, graph, cfg.hidden, cfg.num_layers, cfg.dropout).to(rt.device)
