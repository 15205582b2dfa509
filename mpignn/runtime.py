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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mpignn import dist
from mpignn.config import parse_cache_size
from mpignn.data import check_known, dataset_key, dataset_source, load_dataset
from mpignn.data.features import FEATURE_DTYPES, FEATURE_NORMS, transform_rows
from mpignn.data.hetero import HeteroSchema, hop_fanouts
from mpignn.allocator import tune_allocator
from mpignn.env import bound_onednn_cache, mem_available_bytes, thread_budget
from mpignn.errors import ConfigError, LaunchError, MpignnError, PartitionFormatError, mark_agreed
from mpignn.exchange.alltoall import make_alltoall
from mpignn.exchange.embedding import NodeEmbedding
from mpignn.exchange.features import FeatureStore
from mpignn.hetero_batch import HeteroLayout
from mpignn.loader import LinkSeeds, NodeLoader
from mpignn.log import setup_logging
from mpignn.mpi import (Topology, allreduce_max, allreduce_sum, ceil_split, check_all, check_launcher, chunk_bounds,
                        root_first, topology, world)
from mpignn.partition import LocalPart, check_matches, load_partition, partition_graph, read_meta
from mpignn.partition.deliver import deliver_partition
from mpignn.partition.links import has_link_split, load_link_split, train_pairs
from mpignn.report import peak_rss_mb
from mpignn.sampling import kernels
from mpignn.sampling.access import access_frequency
from mpignn.sampling.distributed import DistributedHops
from mpignn.sampling.neighbor import LocalHops, NeighborSampler

__all__ = ["Runtime", "LocalGraph", "bootstrap", "load_local_graph", "attach_embedding", "make_loader", "reduce_sums",
           "shutdown", "rank_batch_size", "overlap", "cache_budget"]

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
            malloc keeps freed heap memory and mmaps only blocks of 4 MiB and more (`allocator.tune_allocator`:
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


@dataclass
class LocalGraph:
    """This rank's part and the sampler and feature store built on it."""

    part: LocalPart
    sampler: NeighborSampler
    features: FeatureStore
    replicated: bool
    folder: Path
    load_peak_rss_mb: float = 0.0  # this rank's peak memory by the end of start-up (imports, part, cache)
    cache_rows: int = 0  # remote feature rows cached, the most on any rank
    cache_mib: float = 0.0  # their MiB, the most on any rank
    graph_mib: float = 0.0  # memory that depends on the graph (part arrays, one sampling thread's id map, cache)
    links: dict | None = None  # link prediction: this rank's train_pos and held-out pairs (partition.links)
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


def auto_folder(root: str, key: str, method: str, num_parts: int, seed: int, source: str = "") -> Path:
    """Where training without --partitions keeps the partition it makes (benchmarks reuse it). A `source`
    (`data.dataset_source`) other than the key adds its digest to the name: a regenerated npz, or another file
    at the same relative path, gets a partition of its own."""
    import hashlib

    safe = key.replace("/", "_").replace(":", "_").replace(",", "_").replace("=", "")
    if source and source != key:
        safe += "-" + hashlib.sha256(source.encode()).hexdigest()[:12]
    return Path(root) / "mpignn-parts" / f"{safe}-{method}-{num_parts}p-s{seed}"


def load_local_graph(rt: Runtime, dataset: str, root: str = "data", *, partitions: str = "",
                     method: str = "metis", replicated: bool = False, seed: int = 0, fanouts: Sequence[int] = (15,),
                     cache_size: int | str = 0, local_prep: bool = False, prep_timeout: float | None = None,
                     exchange: str = "auto", links: dict | None = None, feature_norm: str = "none",
                     feature_dtype: str = "fp32", edge_fanouts: dict[str, Sequence[int]] | None = None,
                     force: bool = False) -> LocalGraph:
    """Collective over `rt.comm`: make sure a partition exists and load this rank's part.

    Without `partitions`, rank 0 (of each host with `local_prep`) prepares the dataset and partitions it into
    one part per rank (one part in total when `replicated`) under `root/mpignn-parts/`, once; later runs
    reuse it while the dataset's files are the same (`auto_folder`). With `partitions`, the folder must match
    the dataset and world size. A host that does not see the folder receives it (`deliver_partition`), which
    refuses to replace anything there but an mpignn partition folder unless `force`. `exchange` picks the
    feature transport: auto/mpi (MPI on host buffers) or torch (torch.distributed, e.g. NCCL).
    `cache_size` (rows, or "auto": sized by free memory, see `cache_budget`) bounds the cache of the remote
    feature rows that sampling from this rank's training nodes is expected to fetch most; 0: no cache.
    `links` ({"val", "test", "num_tails"} shares and negatives per held-out edge) prepares for link
    prediction: rank 0 holds those edges out (`data.links.split_links`, seeded by `seed`) before it
    partitions, and stores them with the partition; each rank loads its training and held-out pairs.
    `feature_norm` ("none" or "row") and `feature_dtype` ("fp32", "fp16" or "bf16": the table, the cache and
    the exchange in that dtype; batches arrive as float32) transform each rank's own feature rows after loading
    (`data.features.transform_rows`), so fetched and cached rows arrive transformed; the partition stays raw.
    A heterogeneous graph (`data.hetero`) samples each edge type with its own fanout (`edge_fanouts`, see
    `data.hetero.hop_fanouts`) and its loaders give `HeteroData` batches (`hetero_batch`).

    Raises:
        PartitionFormatError / DatasetError: on every rank alike.
        ConfigError: `cache_size` is neither "auto" nor a row count (on every rank alike).
    """
    comm = rt.comm
    try:
        cache_size = parse_cache_size(cache_size)
        if feature_norm not in FEATURE_NORMS:
            raise ConfigError(f"feature_norm must be one of {', '.join(FEATURE_NORMS)}; got {feature_norm!r}. "
                              "HINT: feature_norm='row' (each row scaled to sum 1) or 'none'")
        if feature_dtype not in FEATURE_DTYPES:
            raise ConfigError(f"feature_dtype must be one of {', '.join(FEATURE_DTYPES)}; got {feature_dtype!r}. "
                              "HINT: feature_dtype='bf16' halves feature memory and traffic; 'fp32' keeps them")
    except MpignnError as exc:
        raise mark_agreed(exc) from None
    try:
        check_known(dataset)  # the same name fails the same way on every rank: no collective needed
        key = dataset_key(dataset)
    except MpignnError as exc:
        raise mark_agreed(exc) from None
    num_parts = 1 if replicated else rt.world_size
    part_id = 0 if replicated else rt.rank
    link_params = None if links is None else {**links, "seed": seed}
    if partitions:
        folder = Path(partitions)
        deliver_partition(comm, folder, part_id, force=force)  # to hosts that do not see rank 0's folder
        problem = ""
        try:
            check_matches(read_meta(folder), folder, num_parts=num_parts, dataset=key)
            if link_params is not None and not has_link_split(folder, link_params):
                raise PartitionFormatError(f"expected held-out edges {link_params} in {folder}/links; found "
                                           "none or others. HINT: partition with python -m mpignn.partition "
                                           "--task link and the same --seed and --link-* flags, or drop --partitions")
        except MpignnError as exc:
            problem = str(exc)
        check_all(comm, not problem, problem, PartitionFormatError)
    else:
        # rank 0's view of the files (other hosts may not see them): path and content, not the name as typed
        source = comm.bcast(dataset_source(dataset, root) if comm.rank == 0 else None, root=0)
        folder = auto_folder(root, key + ("-links" if links else ""), method, num_parts, seed, source)
        ready = lambda: (folder / "META.json").is_file() and (  # noqa: E731
            link_params is None or has_link_split(folder, link_params))
        with root_first(comm, per_host=local_prep, timeout=prep_timeout, what=f"preparing {dataset}") as first:
            if first and not ready():
                graph = load_dataset(dataset, root)
                rep = partition_graph(graph, num_parts, folder, method=method, seed=seed, dataset=key, force=True,
                                      links=link_params)
                log.info("partitioned %s into %d parts (%s): edge cut %.1f%%, %.1fs", key, num_parts, method,
                         rep["edge_cut_pct"], rep["seconds"])
                del graph
        deliver_partition(comm, folder, part_id, force=force)
    # numba writes its on-disk cache when it compiles: one rank per host compiles, the others then load.
    with root_first(comm, per_host=True, timeout=prep_timeout, what="compiling the sampling kernels"):
        kernels.warm_up()
    problem, part, held_out = "", None, None
    try:
        part = load_partition(folder, part_id, mmap=True)
        if link_params is not None:  # checked here, so a bad file fails on every rank alike
            held_out = load_link_split(folder, np.asarray(part.meta.part_offsets), part_id)
    except MpignnError as exc:
        problem = str(exc)
    check_all(comm, not problem, problem, PartitionFormatError)
    part.x = transform_rows(part.x, feature_norm, feature_dtype)
    meta = part.meta
    schema = HeteroSchema.from_json(meta.hetero) if meta.hetero else None
    try:
        fanouts = hop_fanouts(fanouts, edge_fanouts, schema)
        if schema is not None and links is not None:
            raise ConfigError("link prediction on a heterogeneous graph is not supported yet. HINT: --task node")
    except MpignnError as exc:
        raise mark_agreed(exc) from None
    local = LocalHops(part.rowptr, part.col, part.lo, part.type_rowptr, schema.num_etypes if schema else 1)
    if replicated or rt.world_size == 1:
        source: Any = local
        features = FeatureStore(part.x, part.y, part.lo)
    else:
        # Sampling and feature exchange talk on a communicator of their own, so a loader thread can run
        # them while the training thread all-reduces gradients on `comm`.
        data_comm = comm.Dup()
        source = DistributedHops(data_comm, local, np.asarray(meta.part_offsets))
        transport = make_alltoall(exchange, data_comm, rt.device)
        table = part.x if exchange != "torch" else _device_table(part.x, rt.device)
        features = FeatureStore(table, part.y, part.lo, np.asarray(meta.part_offsets), data_comm, transport)
    sampler = NeighborSampler(source, meta.num_nodes, fanouts)
    cache_rows, cache_mib = 0, 0.0
    if not (replicated or rt.world_size == 1) and cache_size != 0:
        # link prediction seeds batches with both ends of edges (and uniform negatives): every own node
        seeds = part.train_idx if links is None else np.arange(part.lo, part.hi, dtype=np.int64)
        cache_rows, cache_mib = _build_cache(rt, local, part, fanouts, features, cache_size, seeds)
    pairs = None
    if link_params is not None:
        pairs = {**held_out, "train_pos": train_pairs(part.rowptr, part.col, part.lo)}
    graph_bytes = part.training_bytes + sampler.scratch_bytes + features.cache_bytes
    graph_mib = allreduce_max(comm, [graph_bytes / 2**20])[0]
    return LocalGraph(part=part, sampler=sampler, features=features, replicated=replicated, folder=folder,
                      load_peak_rss_mb=peak_rss_mb(), cache_rows=cache_rows, cache_mib=cache_mib,
                      graph_mib=float(graph_mib), links=pairs,
                      layout=HeteroLayout(schema, *meta.type_blocks()) if schema is not None else None)


def attach_embedding(rt: Runtime, graph: LocalGraph, dim: int, *, lr: float = 0.1, seed: int = 0) -> None:
    """Collective over `rt.comm`: give every node `dim` learnable numbers, held by its owner (this rank's
    rows: its part), on a communicator of their own; batches then carry them after the features (`mpignn.loop`
    pulls them and steps them). Not for a replicated graph (no owners)."""
    if graph.replicated and rt.world_size > 1:
        raise mark_agreed(ConfigError("learnable rows need owners; a replicated graph has none. HINT: "
                                      "partitioned training (no --replicated)"))
    part = graph.part
    comm = rt.comm.Dup() if rt.world_size > 1 else None
    graph.embedding = NodeEmbedding(part.hi - part.lo, dim, lo=part.lo,
                                    part_offsets=np.asarray(part.meta.part_offsets), comm=comm, lr=lr, seed=seed)
    held = graph.embedding.weight.nbytes + sum(a.nbytes for a in graph.embedding.optimizer.state().values())
    graph.graph_mib += float(allreduce_max(rt.comm, [held / 2**20])[0])


def _device_table(x: np.ndarray, device: str) -> Any:
    """The rank's feature rows as a tensor on `device` (a view of the array on CPU), for `--exchange torch`."""
    import torch

    if not x.flags.writeable:  # a memory-mapped part: torch wants writable memory to wrap
        x = np.array(x)
    table = torch.from_numpy(x)
    if x.dtype == np.uint16:  # bfloat16 bits (data.features)
        table = table.view(torch.bfloat16)
    return table.to(device)


# `--cache-size auto`: the caches of a host's ranks together take at most this share of the memory the host
# has available at start-up (the rest stays for batches, the model, and the other ranks' growth) ...
AUTO_CACHE_MEMORY_SHARE = 0.25
# ... and hold only remote nodes that sampling is expected to fetch at least once in 10 epochs: a row fetched
# less often saves less traffic over 10 epochs than its start-up fetch costs, and holds memory all along.
MIN_FETCHES_PER_EPOCH = 0.1
# Where the available memory is unknown (no /proc/meminfo), `auto` takes at most this many rows.
AUTO_CACHE_FALLBACK_ROWS = 50_000
# Seeds per batch the access estimate assumes. It only shapes how a hub's visits saturate within one batch
# (a node is fetched once per batch however often it is visited), never the order of the ranking.
_ESTIMATE_BATCH = 1024


def cache_budget(cache_size: int | str, row_bytes: int, reachable: int, worth: int, spare_bytes: int | None,
                 ranks_sharing: int) -> int:
    """Rows of this rank's remote-feature cache.

    Args:
        cache_size: a row count, or "auto": AUTO_CACHE_MEMORY_SHARE of `spare_bytes` over `ranks_sharing`, in
            rows, capped by `worth` (AUTO_CACHE_FALLBACK_ROWS rows at most when `spare_bytes` is None).
        row_bytes: bytes of one feature row.
        reachable: remote nodes sampling can fetch at all (a row count never goes beyond them).
        worth: remote nodes expected to be fetched at least MIN_FETCHES_PER_EPOCH times per epoch.
        spare_bytes: memory available to the ranks that share it (None: unknown).
        ranks_sharing: ranks that share `spare_bytes` (the host's ranks, or a device's).
    """
    if cache_size != "auto":
        return max(0, min(int(cache_size), reachable))
    if spare_bytes is None:
        return min(AUTO_CACHE_FALLBACK_ROWS, worth)
    share = AUTO_CACHE_MEMORY_SHARE * max(0, spare_bytes) / max(1, ranks_sharing)
    return min(int(share // max(1, row_bytes)), worth)


def _build_cache(rt: Runtime, local: LocalHops, part: LocalPart, fanouts: Sequence[int], features: FeatureStore,
                 cache_size: int | str, seeds: np.ndarray) -> tuple[int, float]:
    """Collective over `rt.comm`: rank the remote nodes by how often sampling is expected to fetch them, size
    the budget, fetch the rows; rank 0 logs the budget. Returns (rows, MiB) of the largest cache of any rank."""
    comm = rt.comm
    t0 = time.perf_counter()
    # per-edge-type fanouts (heterogeneous graphs) are estimated as their sum over the types
    per_hop = [f if np.ndim(f) == 0 else (-1 if min(f) < 0 else int(sum(f))) for f in fanouts]
    gids, fetches = access_frequency(comm, local, np.asarray(part.meta.part_offsets), seeds, per_hop,
                                     _ESTIMATE_BATCH)
    remote = (gids < part.lo) | (gids >= part.hi)
    gids, fetches = gids[remote], fetches[remote]
    worth = int((fetches >= MIN_FETCHES_PER_EPOCH).sum())
    spare, sharing = _spare_memory(rt, features) if cache_size == "auto" else (None, 1)
    rows = cache_budget(cache_size, features.row_bytes, len(gids), worth, spare, sharing)
    hot = gids[np.argsort(-fetches, kind="stable")[:rows]]
    t1 = time.perf_counter()
    features.build_cache(hot)
    t2 = time.perf_counter()
    most = allreduce_max(comm, [len(features.cache_gid), features.cache_bytes / 2**20, worth, t1 - t0, t2 - t1])
    cache_rows, cache_mib = int(most[0]), float(most[1])
    if rt.rank == 0:
        why = f"--cache-size {cache_size}"
        if cache_size == "auto":
            why += (f": {AUTO_CACHE_MEMORY_SHARE:.0%} of {spare / 2**30:.1f} GiB available over {sharing} ranks, "
                    if spare is not None else f": memory unknown, at most {AUTO_CACHE_FALLBACK_ROWS:,} rows, ")
            why += f"capped by the {int(most[2]):,} remote nodes worth caching"
        log.info("feature cache: %s rows, %.1f MiB per rank at most (%s); access estimate %.2fs, fetch %.2fs",
                 f"{cache_rows:,}", cache_mib, why, most[3], most[4])
    return cache_rows, cache_mib


def _spare_memory(rt: Runtime, features: FeatureStore) -> tuple[int | None, int]:
    """(bytes a cache may come out of, ranks that share them): the host's available memory for a host table,
    the device's free memory for a table on an accelerator."""
    if features.on_host or features.x.device.type == "cpu":
        return mem_available_bytes(), rt.topo.local_size
    from mpignn.device import accelerator

    mod = accelerator(features.x.device)
    free, _ = mod.mem_get_info(features.x.device)
    return int(free), rt.choice.shared_by  # ranks of this host computing in this device's memory


def make_loader(rt: Runtime, graph: LocalGraph, split: str, fanouts: Sequence[int] | None = None, *,
                batch_size: int = 1024, batch_scope: str = "global", shuffle: bool | None = None, seed: int = 0,
                prefetch: str = "auto", negatives: str = "uniform", max_steps: int = 0) -> NodeLoader:
    """Collective over `rt.comm` (agrees on the step count): a loader over this rank's `split` nodes
    ("train", "val" or "test"), or its pairs when the graph was loaded for link prediction (batches then
    carry `edge_label_index` and `edge_label`, as PyG's LinkNeighborLoader gives); in replicated mode each
    rank takes a ceiling-division share of them.

    Args:
        batch_size: seeds (nodes, or positive pairs) per step; for "train" with `batch_scope="global"` the
            global batch, of which this rank takes its ceiling-division share (`rank_batch_size`); per rank
            otherwise. Held-out pairs each bring 1 + K negatives, so their batches hold fewer positives.
        prefetch: auto, on or off: produce batch k+1 in a thread while batch k computes; see `overlap`.
        negatives: training negatives for link prediction, "uniform" or "tail" (see `LinkSeeds`).
        max_steps: for "train", at most this many steps per epoch (0: all), each epoch from a fresh shuffle.
    """
    if graph.links is None:
        seeds: Any = getattr(graph.part, f"{split}_idx")
        if graph.replicated:
            seeds = np.asarray(ceil_split(seeds, rt.world_size, rt.rank))
    else:
        seeds = _link_seeds(rt, graph, split, negatives)
        if split != "train":
            batch_size = max(1, 8 * batch_size // (2 + seeds.tails.shape[1]))
    sampler = graph.sampler
    if fanouts is not None and list(fanouts) != sampler.fanouts:
        sampler = NeighborSampler(sampler.source, sampler.num_nodes, fanouts)
    talks = rt.world_size > 1 and not graph.replicated
    train = split == "train"
    if train:
        batch_size = rank_batch_size(batch_size, rt.world_size, rt.rank, batch_scope)
    return NodeLoader(sampler, graph.features, seeds, batch_size, shuffle=train if shuffle is None else shuffle,
                      seed=seed, comm=rt.comm, device=rt.device,
                      prefetch=overlap(rt, talks, prefetch, device_exchange=_rows_on_device(graph.features)),
                      wrap=train, max_steps=max_steps if train else 0, layout=graph.layout)


def _link_seeds(rt: Runtime, graph: LocalGraph, split: str, negatives: str) -> LinkSeeds:
    arrays = graph.links
    pos = arrays[f"{split}_pos"]
    mine = np.asarray(ceil_split(np.arange(pos.shape[1]), rt.world_size, rt.rank)) if graph.replicated else None
    pick = (lambda a, axis=1: a if mine is None else np.take(a, mine, axis=axis))  # noqa: E731
    num_nodes = graph.part.meta.num_nodes
    if split == "train":
        return LinkSeeds(pick(pos), num_nodes, negatives=negatives)
    return LinkSeeds(pick(pos), num_nodes, fixed_neg=pick(arrays[f"{split}_neg"]),
                     tails=pick(arrays[f"{split}_neg_tails"], 0))


def rank_batch_size(batch_size: int, world_size: int, rank: int, scope: str = "global") -> int:
    """This rank's training seeds per step: its ceiling-division share of a global `batch_size` (at least
    one seed), or `batch_size` itself with scope "rank"."""
    if scope == "rank":
        return batch_size
    start, stop = chunk_bounds(batch_size, world_size, rank)
    return max(1, stop - start)


# Below this many threads per rank a CPU rank computes on every core it has, and a producer thread (numba
# sampling, MPI progress polling) takes cores from the matmuls: measured on 2 cores, 2 ranks x 1 thread ran
# 13.75 s per epoch without and 15.19 s with a producer thread.
OVERLAP_MIN_THREADS = 4


def overlap(rt: Runtime, talks: bool, mode: str = "auto", device_exchange: bool = False) -> bool:
    """Whether a loader produces the next batch in a background thread.

    One part (nothing collective in the loader): always, unless `mode` is off. Several parts: the thread
    runs the sampling and exchange collectives (on their own communicator), which needs MPI_THREAD_MULTIPLE;
    `auto` turns it on where compute leaves a core free: on a GPU or XPU (the host thread mostly waits for
    the device), or with at least OVERLAP_MIN_THREADS threads per rank. Never with rows exchanged by
    torch.distributed on a GPU/XPU (`device_exchange`, `--exchange torch` there): the thread's all_to_all
    and DDP's all-reduce would be two communicators in flight on one device from two threads, which NCCL
    does not order (it can hang), and the gathers would share the compute stream anyway. (On CPU the rows
    go over gloo and DDP over MPI: no device, the thread stays allowed.)

    Raises:
        ConfigError: `mode` is on, the loader talks to other ranks and MPI lacks MPI_THREAD_MULTIPLE, or
            the rows go by torch.distributed.
    """
    if mode == "off":
        return False
    if not talks:
        return True
    if device_exchange:
        if mode == "on":
            raise mark_agreed(ConfigError("--prefetch on cannot run with --exchange torch on a GPU/XPU across parts: "
                              "expected one thread issuing device collectives, got a loader thread beside DDP's. "
                              "HINT: --prefetch auto (off here) or --exchange mpi"))
        return False
    from mpi4py import MPI

    threaded = MPI.Query_thread() >= MPI.THREAD_MULTIPLE
    if mode == "on":
        if not threaded:
            raise mark_agreed(ConfigError("--prefetch on needs MPI_THREAD_MULTIPLE with several parts; this MPI gives "
                              f"level {MPI.Query_thread()}. HINT: --prefetch auto, or an MPI built with threads"))
        return True
    spare = rt.choice.device_type != "cpu" or rt.threads >= OVERLAP_MIN_THREADS
    return threaded and spare


def _rows_on_device(features: FeatureStore) -> bool:
    """Whether the feature rows are a tensor on an accelerator (exchanged by NCCL/xccl or gloo there)."""
    return not features.on_host and features.x.device.type != "cpu"


def reduce_sums(rt: Runtime, values: dict[str, float]) -> dict[str, float]:
    """Collective over `rt.comm`: sum each value over the ranks (reduce sums, then divide; never average
    averages)."""
    keys = sorted(values)
    summed = allreduce_sum(rt.comm, [values[k] for k in keys])
    return dict(zip(keys, summed.tolist()))


def shutdown() -> None:
    """Tear down torch.distributed (MPI finalises itself at exit)."""
    dist.destroy_process_group()

