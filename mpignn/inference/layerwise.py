"""Exact layer-wise inference: every layer for every node with whole in-neighbourhoods, block by block, the
previous layer's remote rows through the training exchange (docs/predict.md).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, TYPE_CHECKING

import numpy as np
import torch

from mpignn.errors import ConfigError, mark_agreed
from mpignn.exchange.features import FeatureStore
from mpignn.mpi import allreduce_max, allreduce_sum
from mpignn.inference.blocks import Block, HaloIndex, block_sources, make_block, make_blocks, type_runs
from mpignn.inference.layers import LayerStack, unwrap
from mpignn.sampling.neighbor import loop_free_degree

if TYPE_CHECKING:
    from mpignn.launch.bootstrap import Runtime
    from mpignn.loader.local_graph import LocalGraph

__all__ = ["LayerStack", "run_layers", "own_inputs", "make_store", "to_device",
           "exact_outputs"]

log = logging.getLogger(__name__)


def to_device(block: Block, device: Any, inv_sqrt: Callable[[np.ndarray], np.ndarray] | None) -> dict[str, Any]:
    """A block's index tensors on `device`; with `inv_sqrt` (gid -> deg^-1/2) GCN's edge weights too, self-loop
    edges dropped (gcn_norm replaces them by one loop per node)."""
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    row, col = block.row, block.col
    out: dict[str, Any] = {"n_dst": block.n_dst}
    if inv_sqrt is not None:
        keep = row != col
        row, col = row[keep], col[keep]
        d = inv_sqrt(block.src_gid)
        out["edge_weight"] = t(d[row] * d[col])
        out["loop_weight"] = t(d[:block.n_dst] * d[:block.n_dst])
    out.update(row=t(row), col=t(col), in_degree=t(block.in_degree), dst_type=block.dst_type)
    out["edge_index"] = torch.stack([out["row"], out["col"]])
    if block.edge_type is not None:
        out.update(edge_type=t(block.edge_type), type_degree=t(block.type_degree))
    return out


def make_store(table: np.ndarray, part: Any, comm: Any, alltoall: Any) -> FeatureStore:
    """A FeatureStore over one layer's own rows (labels unused)."""
    offsets = part.meta.part_offsets if comm is not None and comm.size > 1 else None  # one part: no owners
    return FeatureStore(table, np.zeros(len(table), dtype=np.int8), part.lo, offsets, comm, alltoall)


def own_inputs(part: Any, rows: np.ndarray | None = None) -> np.ndarray:
    """Layer 0's rows of a part's own nodes as float32, as training batches give them: features widened, then
    the run's learnable `rows` if any; a featureless type's input is its learnable rows or a constant 1."""
    x, hetero = part.x, part.meta.hetero
    if x.dtype == np.uint16:  # bfloat16 bits (data.features): the upper half of a float32
        x = (np.asarray(x).astype(np.uint32) << 16).view(np.float32)
    if not hetero:
        if rows is None:
            return np.asarray(x, dtype=np.float32)  # no copy where x is float32 already
        return np.concatenate([np.asarray(x, dtype=np.float32), np.asarray(rows, dtype=np.float32)], axis=1)
    width = rows.shape[1] if rows is not None else 1
    table = np.zeros((len(x), max(x.shape[1], width)), dtype=np.float32)
    table[:, :x.shape[1]] = x
    for k, a, b in type_runs(part):
        if not hetero["feature_dims"][k]:
            table[a:b] = 0.0
            table[a:b, :width] = rows[a:b] if rows is not None else 1.0
    return table


def run_layers(comm: Any, part: Any, stack: LayerStack, table: np.ndarray, *, chunk: int, device: Any,
               alltoall: Any, keep: tuple[int, ...] = (), halo_mib: float = 256) -> dict[int, np.ndarray]:
    """Collective over `comm` (every rank, the same number of exchanges per layer): apply every layer to
    every own node; returns {layer: own rows} of the last layer and of the layers in `keep` (0: `table`).
    `chunk` target nodes a block; consecutive blocks' remote rows are fetched together up to `halo_mib`.
    """
    blocks = make_blocks(part, chunk)
    lo, hi = part.lo, part.hi
    inv_sqrt = None
    if stack.needs_degrees:
        degree = torch.from_numpy((loop_free_degree(part.rowptr, part.col, lo) + 1).astype(np.float32))
        own = degree.pow(-0.5).numpy()  # deg^-1/2 of each own node, as PyG's `gcn_norm` on the whole graph
        halo = np.asarray(part.halo_gid, dtype=np.int64)
        halo_d = make_store(own[:, None], part, comm, alltoall).gather(halo)[0][:, 0]  # collective
        inv_sqrt = lambda gid: _lookup(gid, part.lo, own, halo, halo_d)  # noqa: E731
    kept = {0: table} if 0 in keep else {}
    fetched, exchanges = 0, 0
    index = HaloIndex(blocks, lo, hi)
    t0 = time.perf_counter()
    for layer in range(stack.num_layers):
        outputs = stack.rows_at(layer + 1)
        mine = [i for i, b in enumerate(blocks) if b.dst_type in outputs]  # others' rows: zeros
        budget = max(1, int(halo_mib * 2**20) // max(1, 4 * table.shape[1])) if halo_mib > 0 else 0
        groups = index.group(mine, budget) if comm is not None else [[i] for i in mine]
        steps = int(allreduce_max(comm, [len(groups)])[0]) if comm is not None else len(groups)
        store = make_store(table, part, comm, alltoall)
        out = np.zeros((hi - lo, _out_width(stack, layer, table.shape[1], device)), dtype=np.float32)
        for step in range(steps):
            group = groups[step] if step < len(groups) else []
            remote, slot = index.rows_of(group)
            halo_rows = store.fetch(remote) if comm is not None else table[:0]  # collective, empty steps too
            for i in group:
                block = blocks[i]
                x = torch.from_numpy(block_sources(block, table, lo, halo_rows, slot[index.pos[i]])).to(device)
                with torch.no_grad():
                    y = stack.apply(layer, x, to_device(block, device, inv_sqrt)).float().cpu().numpy()
                start = block.src_gid[0] - lo
                out[start:start + block.n_dst] = y
        fetched += store.bytes_received
        exchanges += steps
        table = out
        if layer + 1 in keep:
            kept[layer + 1] = table
    kept[stack.num_layers] = table
    total = allreduce_sum(comm, [fetched])[0] if comm is not None else fetched
    log.info("%d layers over %d blocks per rank in %.4fs, %d row exchanges, %.1f MiB of rows fetched",
             stack.num_layers, len(blocks), time.perf_counter() - t0, exchanges, total / 2**20)
    return kept


def exact_outputs(rt: Runtime, graph: LocalGraph, encoder: torch.nn.Module, *, chunk: int = 8192,
                  act: Any = None, device: Any = None, halo_mib: float = 256) -> tuple[np.ndarray, Any, FeatureStore]:
    """Collective over `rt.comm` where the ranks hold parts: `encoder`'s last-layer rows of this rank's own
    nodes by exact inference (`--eval exact`, `runtime.inference`), in eval mode; `act` goes between a plain
    `.convs` module's convs. Returns (rows [n_own, F], their communicator or None, a FeatureStore over `rows` to
    fetch any node's row); a model it does not know or that does not fit the graph is a ConfigError on every rank.
    """
    part = graph.part
    rows = graph.embedding.weight if graph.embedding is not None else None
    table = own_inputs(part, rows)
    try:  # the same model and graph on every rank: no collective needed to agree
        stack = LayerStack(encoder, act)
        _check_fits(stack, type(unwrap(encoder)).__name__, bool(part.meta.hetero), table.shape[1])
    except ConfigError as exc:
        raise mark_agreed(exc) from None
    comm = rt.comm if rt.world_size > 1 and not graph.replicated else None
    alltoall = graph.features.alltoall if comm is not None else None
    out = run_layers(comm, part, stack, table, chunk=chunk, device=rt.device if device is None else device,
                     alltoall=alltoall, halo_mib=halo_mib)[stack.num_layers]
    return out, comm, make_store(out, part, comm, alltoall)


def _check_fits(stack: LayerStack, name: str, hetero: bool, width: int) -> None:
    if hetero != stack.hetero:
        have, want = ("a heterogeneous", "mpignn's HeteroGNN") if hetero else ("a homogeneous", "a model over one "
                                                                                "node type")
        raise ConfigError(f"exact inference on {have} graph expects {want}; got {name}. HINT: "
                          + ("build it with mpignn.models.build_model(name, graph.in_channels(), ..., "
                             "schema=graph.schema)" if hetero else "load a homogeneous dataset"))
    expected = stack.in_width()
    if expected is not None and expected != width:
        raise ConfigError(f"the model's first conv takes {expected} numbers per node; the graph gives {width} "
                          "(its features, then any learnable rows). HINT: build the model with "
                          "in_channels=graph.num_features")


def _lookup(gid: np.ndarray, lo: int, own: np.ndarray, halo: np.ndarray, halo_d: np.ndarray) -> np.ndarray:
    """deg^-1/2 of any source of this rank's blocks: its own nodes' or its halo's (fetched once)."""
    inside = (gid >= lo) & (gid < lo + len(own))
    d = np.empty(len(gid), dtype=np.float32)
    d[inside] = own[gid[inside] - lo]
    d[~inside] = halo_d[np.searchsorted(halo, gid[~inside])]
    return d


def _out_width(stack: LayerStack, layer: int, width: int, device: Any) -> int:
    """Output width of `layer`, known before any block runs (a part may have none): one zero row through it."""
    if stack.hetero:
        return stack.out_width(layer)
    block = make_block(np.zeros(2, dtype=np.int64), np.empty(0, dtype=np.int64), 0, 0, 1)  # one target, no edges
    x = torch.zeros((1, width), device=device)
    with torch.no_grad():
        return int(stack.apply(layer, x, to_device(block, device, (lambda g: np.ones(len(g), np.float32))
                                                   if stack.needs_degrees else None)).shape[1])
