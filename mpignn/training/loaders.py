"""The training CLI's loaders (`make_loader`) and the `BatchLoader` arguments of each --minibatch mode, which
`runtime.NeighborLoader` (your own loop's, with the same modes) takes too."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mpignn.config.choices import MINIBATCH_MODES
from mpignn.config.refusals import refusal
from mpignn.config.train_config import TrainConfig
from mpignn.config.values import check_memory
from mpignn.errors import ConfigError, mark_agreed
from mpignn.exchange.alltoall import make_alltoall
from mpignn.exchange.cache_policy import spare_memory
from mpignn.launch.bootstrap import Runtime
from mpignn.loader.batches import BatchLoader
from mpignn.loader.local_graph import SPLITS, LocalGraph
from mpignn.loader.prefetch import overlap, rows_on_device
from mpignn.mpi import chunk_bounds
from mpignn.mpi.collectives import checked
from mpignn.sampling.cooperative import CooperativeSampler
from mpignn.tasks import make_task, picker

__all__ = ["make_loader", "loader_arguments", "check_minibatch", "cooperative_refusal", "rank_batch_size",
           "full_fit_problem"]


def make_loader(rt: Runtime, graph: LocalGraph, split: str, fanouts: Sequence[int] | None = None, *,
                batch_size: int = TrainConfig.batch_size, batch_scope: str = TrainConfig.batch_scope,
                shuffle: bool | None = None, seed: int = TrainConfig.seed, prefetch: str = TrainConfig.prefetch,
                max_steps: int = TrainConfig.max_steps, minibatch: str | None = None,
                eval_batch_size: int = TrainConfig.eval_batch_size, **unknown: Any) -> BatchLoader:
    """Collective over `rt.comm` (agrees on the step count): build a loader over this rank's seeds of `split`.

    `batch_size` counts seeds (nodes, or positive pairs); for "train" with `batch_scope="global"` it is the
    global batch, of which this rank takes its share. `eval_batch_size` 0 is `Task.eval_factor` times it.
    `max_steps` (0: all) caps a training epoch, each from a fresh shuffle. `minibatch` None is "independent";
    cooperative is train only (evaluation samples independently), and `auto` is the caller's to resolve.
    """
    task = graph.task or make_task()
    for key in unknown:  # the same call on every rank
        hint = ("make_loader takes fanouts; num_neighbors is runtime.NeighborLoader's (PyG's name)"
                if key == "num_neighbors" else f"make_loader got an unknown keyword {key!r}")
        raise mark_agreed(ConfigError(f"{hint}. HINT: make_loader(rt, graph, 'train', fanouts=[15, 10]) or "
                                      "NeighborLoader(graph, num_neighbors=[15, 10], input_nodes='train')"))
    if split not in SPLITS:
        raise mark_agreed(ConfigError(f"split must be one of {', '.join(SPLITS)}; got {split!r}. HINT: 'train'"))
    minibatch = minibatch or "independent"
    check_minibatch(minibatch)  # before the seeds' and the loader's collectives, and before evaluation rewrites it
    seeds = task.seeds(graph, split, picker(graph.replicated, rt.world_size, rt.rank))
    train = split == "train"
    if not train:  # evaluation: this rank's batches, larger, sampled independently unless full
        batch_size = task.eval_batch_size(seeds, eval_batch_size or task.eval_factor * batch_size)
        batch_scope, minibatch = "rank", "full" if minibatch == "full" else "independent"
    sampler = graph.sampler if train else graph.sampler.for_evaluation()
    if fanouts is not None and list(fanouts) != sampler.fanouts:
        sampler = sampler.with_fanouts(fanouts)
    return BatchLoader(**loader_arguments(rt, graph, sampler, seeds, batch_size, batch_scope, minibatch,
                                          prefetch=prefetch, shuffle=train if shuffle is None else shuffle, seed=seed,
                                          wrap=train, max_steps=max_steps if train else 0, name=f"the {split} loader"))


def loader_arguments(rt: Runtime, graph: LocalGraph, sampler: Any, seeds: Any, batch_size: int, batch_scope: str,
                     minibatch: str, *, prefetch: str, **options: Any) -> dict[str, Any]:
    """Collective over `rt.comm` (a cooperative sampler's communicators): `BatchLoader`'s arguments for `minibatch`
    batches of `seeds` plus `options` (its other keywords), as `make_loader` and the runtime's loaders take them.

    "full" takes every seed and neighbour in one step, made once and kept. A graph whose rows its owners cannot
    compute (`cooperative_refusal`) in full batches, or cooperative ones across parts, is an agreed ConfigError;
    the callers refuse an unknown `minibatch` first (`check_minibatch`).
    """
    talks = rt.world_size > 1 and not graph.replicated
    owners = minibatch == "full" or (talks and minibatch == "cooperative")  # each row computed by its owner
    problem = cooperative_refusal(graph, minibatch) if owners else ""
    if problem:
        raise mark_agreed(ConfigError(problem))
    if minibatch == "full":
        whole = [-1] * len(sampler.fanouts)
        sampler = sampler.with_fanouts(whole) if sampler.fanouts != whole else sampler
        options.update(shuffle=False, drop_last=False, wrap=False, max_steps=0, reuse=True)
        batch_size, prefetching = max(1, len(seeds)), False
    else:
        batch_size = rank_batch_size(batch_size, rt.world_size, rt.rank, batch_scope)
        prefetching = overlap(rt, talks, prefetch, device_exchange=rows_on_device(graph.features))
    if talks and owners:  # sampling and the layers' rows each on a communicator of their own (the loader
        # thread's and the training thread's)
        full, own = minibatch == "full", graph.sampler
        rows = make_alltoall("torch" if rows_on_device(graph.features) else "mpi", rt.comm.Dup(), rt.device)
        sampler = CooperativeSampler(rt.comm.Dup(), own.source.local, np.asarray(graph.part.meta.part_offsets),
                                     sampler.fanouts, rows, method=own.method, dependency=1 if full else own.dependency,
                                     layer_dependency=own.layer_dependency, iterations=0 if full else own.iterations,
                                     keep_inputs=not full and own.dependency > 1)
    return dict(sampler=sampler, features=graph.features, seeds=seeds, batch_size=batch_size, comm=rt.comm,
                device=rt.device, prefetch=prefetching, layout=graph.layout, **options)


def check_minibatch(minibatch: str) -> None:
    """Refuse a `minibatch` mode the loaders do not know ("auto" is the caller's to resolve): an agreed
    ConfigError (the same mode on every rank). Not collective."""
    if minibatch not in MINIBATCH_MODES:  # Python callers' argument: the message names it, not the CLI flag
        raise mark_agreed(ConfigError(f"minibatch must be one of {', '.join(MINIBATCH_MODES)}; got {minibatch!r}. "
                                      "HINT: minibatch='independent'"))


def cooperative_refusal(graph: LocalGraph, mode: str = "cooperative") -> str:
    """Return why `mode` batches cannot train `graph` (one line with its hint), or "". Not collective."""
    task = graph.task or make_task()
    method = getattr(getattr(graph, "sampler", None), "method", "neighbor")
    return refusal({"minibatch": mode, "sampler": method, "replicated": graph.replicated,
                    "embed_dim": graph.embedding.dim if graph.embedding is not None else 0, "task": task.name,
                    "cooperative_task": task.cooperative, "hetero": graph.layout is not None})


def full_fit_problem(rt: Runtime, graph: LocalGraph, model: Any) -> str:
    """Collective over `rt.comm`: return why `--minibatch full` cannot train `graph` (a refusal, or a step that
    would not fit some rank's memory), the same on every rank; "" where it can."""
    problem = cooperative_refusal(graph, "full")
    if problem:
        return problem
    module = getattr(model, "module", model)
    try:
        with checked(rt.comm, ConfigError, ConfigError):
            if hasattr(module, "activation_bytes"):
                part = graph.part
                rows = int(part.hi - part.lo) + len(part.halo_gid)
                available, sharing = spare_memory(rt, graph.features)
                estimate = module.activation_bytes(rows, len(part.col), graph.features.x.dtype.itemsize) * sharing
                check_memory(estimate, available, f"--minibatch full: {rows:,} rows and {len(part.col):,} edges "
                             f"per layer on this rank, {sharing} rank(s) sharing its memory", "more ranks (more "
                             "hosts), or --minibatch cooperative (the same rows a batch at a time)")
    except ConfigError as exc:
        return str(exc)
    return ""


def rank_batch_size(batch_size: int, world_size: int, rank: int, scope: str = "global") -> int:
    """Return this rank's share of a global `batch_size` (at least 1), or `batch_size` with scope "rank"."""
    if scope == "rank":
        return batch_size
    start, stop = chunk_bounds(batch_size, world_size, rank)
    return max(1, stop - start)
