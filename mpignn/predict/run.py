"""Predict with a restored run: exact inference over every node, the task's per-node fields, scores of given
node pairs, and the predictions folder. What `python -m mpignn.predict` calls after parsing.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch

from mpignn.errors import ConfigError, agreed, mark_agreed
from mpignn.exchange.alltoall import make_alltoall
from mpignn.fileio import load_npy
from mpignn.mpi import allreduce_max, chunk_bounds, steps_per_epoch
from mpignn.mpi.collectives import checked
from mpignn.inference.blocks import type_runs
from mpignn.inference.layerwise import LayerStack, make_store, own_inputs, run_layers
from mpignn.predict.output import write_predictions
from mpignn.predict.restore import Restored
from mpignn.launch.allocator import peak_rss_mb
from mpignn.runtime import Runtime

__all__ = ["infer", "predict_to", "read_pairs"]

log = logging.getLogger(__name__)


def infer(rt: Runtime, run: Restored, *, emb_layer: int = -1, chunk: int = 8192,
          halo_mib: float = 256) -> dict[str, np.ndarray] | dict[str, dict[str, np.ndarray]]:
    """Collective over `rt.comm`: this rank's own nodes' fields ("node_id", the task's, "emb" of `emb_layer`,
    "logits"), per node type on a heterogeneous graph. `chunk` and `halo_mib`: as `layerwise.run_layers`.

    Raises:
        ConfigError: on every rank alike: an --emb-layer outside 0..layers, or a model exact inference does
            not know.
    """
    part, task = run.graph.part, run.task
    with agreed(ConfigError):  # the same model and flags on every rank
        stack = LayerStack(task.encoder(run.model))
        emb_layer = task.emb_layer(stack.num_layers) if emb_layer < 0 else emb_layer
        if not 0 <= emb_layer <= stack.num_layers:
            raise ConfigError(f"--emb-layer expected a layer in 0..{stack.num_layers} (0: the input rows, "
                              f"{stack.num_layers}: the last layer); got {emb_layer}. HINT: e.g. --emb-layer "
                              f"{task.emb_layer(stack.num_layers)} (the default)")
    rows = run.graph.embedding.weight if run.graph.embedding is not None else None
    comm = rt.comm if rt.world_size > 1 else None
    transport = make_alltoall(run.cfg.exchange, rt.comm, rt.device) if comm is not None else None
    tables = run_layers(comm, part, stack, own_inputs(part, rows), chunk=chunk, device=rt.device,
                        alltoall=transport, keep=(emb_layer,), halo_mib=halo_mib)
    logits, emb = tables[stack.num_layers], tables[emb_layer]
    schema = run.graph.schema
    widths = run.graph.in_channels()
    groups: dict[str, dict[str, np.ndarray]] = {}
    for k, a, b in type_runs(part):  # a homogeneous graph: one run, every field
        first = int(schema.offsets[k]) if schema is not None else 0  # the type's first id in the graph's
        group = {"node_id": np.asarray(part.orig_id[a:b], dtype=np.int64) - first}
        if k in stack.rows_at(stack.num_layers):
            fields = task.predict_fields(torch.from_numpy(logits[a:b]))
            group.update({name: v.cpu().numpy() for name, v in fields.items()}, logits=logits[a:b])
        if k in stack.rows_at(emb_layer):
            group["emb"] = emb[a:b] if emb_layer or schema is None else emb[a:b, :widths[stack.node_types[k]]]
        groups[stack.node_types[k]] = group
    return groups if schema is not None else groups[stack.node_types[0]]


def read_pairs(path: str, num_nodes: int) -> np.ndarray:
    """int64 [P, 2] node pairs (original ids) from an npy of shape [P, 2] or [2, P]. Not collective.

    Raises:
        ConfigError: not an integer array of that shape, or ids outside the graph.
    """
    try:
        pairs = load_npy(path, mmap=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--pairs expected an npy of node pairs; cannot read {path}: {exc}. HINT: np.save(path, "
                          "pairs) with an int array of shape [P, 2]") from None
    if pairs.ndim == 2 and pairs.shape[0] == 2 and pairs.shape[1] != 2:
        pairs = pairs.T
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise ConfigError(f"--pairs expected an int array of shape [P, 2] or [2, P]; got {pairs.dtype} "
                          f"{tuple(pairs.shape)} in {path}. HINT: np.save(path, np.asarray(pairs, dtype=np.int64))")
    if len(pairs) and (int(pairs.min()) < 0 or int(pairs.max()) >= num_nodes):
        raise ConfigError(f"--pairs expected node ids in [0, {num_nodes}); got {int(pairs.min())}..{int(pairs.max())} "
                          f"in {path}. HINT: the ids are the dataset's original node ids")
    return np.asarray(pairs, dtype=np.int64)


def _score_pairs(rt: Runtime, run: Restored, out_rows: np.ndarray, pairs: np.ndarray, chunk: int) -> np.ndarray:
    """Collective over `rt.comm`: scores of this rank's share of `pairs`, `chunk` pairs' rows at a time."""
    if run.graph.folder is None:  # the same graph on every rank
        raise mark_agreed(ConfigError("--pairs expected a partition folder's node_map.npy to find the pairs' "
                                      "nodes; got a graph partitioned in memory, which has none. HINT: "
                                      "predict on a graph loaded by dataset name"))
    node_map = load_npy(Path(run.graph.folder) / "node_map.npy", mmap=True)
    a, b = chunk_bounds(len(pairs), rt.world_size, rt.rank)
    mine = pairs[a:b]
    comm = rt.comm if rt.world_size > 1 else None
    transport = make_alltoall(run.cfg.exchange, rt.comm, rt.device) if comm is not None else None
    store = make_store(out_rows, run.graph.part, comm, transport)
    steps = steps_per_epoch(comm, len(mine), chunk)
    scores = np.empty(len(mine), dtype=np.float32)
    for step in range(steps):
        piece = mine[step * chunk:(step + 1) * chunk]
        ends = np.asarray(node_map[piece.reshape(-1)], dtype=np.int64)
        rows = store.gather(ends)[0]  # collective, empty steps too
        rows = torch.from_numpy(rows).to(rt.device).view(len(piece), 2, out_rows.shape[1])
        if len(piece):
            with torch.no_grad():
                s = run.task.score_pairs(run.model, rows[:, 0], rows[:, 1])
            scores[step * chunk:step * chunk + len(piece)] = s.float().cpu().numpy()
    return scores


def predict_to(rt: Runtime, run: Restored, out: str, *, emb_layer: int = -1, logits: bool = False,
               chunk: int = 8192, pairs: str = "", halo_mib: float = 256) -> Path:
    """Collective over `rt.comm`: `infer`, score `pairs` (an npy path; "" for none), write the folder `out`.

    Raises:
        ConfigError: on every rank alike (see `infer`, `read_pairs`, `Task.score_pairs`, `write_predictions`).
    """
    t0 = time.perf_counter()
    meta = run.graph.part.meta
    pair_ids = None
    if pairs:
        with checked(rt.comm, ConfigError, ConfigError):
            pair_ids = read_pairs(pairs, meta.num_nodes)
            empty = torch.zeros(0, run.cfg.hidden, device=rt.device)
            run.task.score_pairs(run.model, empty, empty)  # a task without a decoder refuses here
    arrays = infer(rt, run, emb_layer=emb_layer, chunk=chunk, halo_mib=halo_mib)
    scores = _score_pairs(rt, run, arrays["logits"], pair_ids, chunk) if pair_ids is not None else None
    schema = run.graph.schema
    if not logits:
        for group in (arrays.values() if schema is not None else [arrays]):
            group.pop("logits", None)
    info = {"checkpoint": run.generation, "epoch": run.epoch, "task": run.cfg.task, "model": run.cfg.model,
            "dataset": run.cfg.dataset,
            "emb_layer": emb_layer if emb_layer >= 0 else run.task.emb_layer(run.cfg.num_layers)}
    where = write_predictions(rt.comm, out, run.graph.part.part_id, meta.num_parts, meta.num_nodes, arrays,
                              pair_scores=scores, info=info,
                              node_types=dict(zip(schema.node_types, schema.node_counts)) if schema else None)
    peak = allreduce_max(rt.comm, [peak_rss_mb()])[0]  # collective
    log.info("predictions for %d nodes written to %s in %.2fs; peak memory %.0f MiB (the most on any rank)",
             meta.num_nodes, where, time.perf_counter() - t0, peak)
    return where
