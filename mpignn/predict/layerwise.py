"""Exact layer-wise inference: every layer for every node with whole in-neighbourhoods, PyG's convolutions.

Each rank computes the rows of the nodes it owns, one chunk of target nodes at a time (a bipartite block:
sources are the chunk's targets first, then their other in-neighbours), fetching the previous layer's rows of
nodes it does not own from their owners through the training exchange (`exchange.FeatureStore`). A rank
holds its own rows of two layers plus one chunk's sources. Imports torch and PyG (through `models`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from mpignn.errors import ConfigError, mark_agreed
from mpignn.exchange.features import FeatureStore
from mpignn.models import SampledGNN
from mpignn.models.aggregate import MeanAdjacency
from mpignn.mpi import allreduce_max, allreduce_sum

__all__ = ["Block", "make_block", "make_blocks", "LayerStack", "gcn_inv_sqrt_degree", "run_layers", "input_table",
           "make_store", "to_device", "exact_outputs"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Block:
    """Targets `lo+a .. lo+b` of a part with all their in-edges, as a bipartite block (numpy, host)."""

    src_gid: np.ndarray
    """int64 [n_src]: global ids of the sources, the targets first (so target i is source i), then the other
    in-neighbours, sorted."""
    row: np.ndarray
    """int64 [e]: each in-edge's source position in `src_gid`."""
    col: np.ndarray
    """int64 [e]: each in-edge's target position, grouped and ascending (the part's CSR order)."""
    in_degree: np.ndarray
    """int64 [n_dst]: in-edges of each target."""
    n_dst: int

    @property
    def n_src(self) -> int:
        return len(self.src_gid)


def make_block(rowptr: np.ndarray, col: np.ndarray, lo: int, a: int, b: int) -> Block:
    """The block of own rows `a..b` (local ids) of a part with CSR (`rowptr`, `col`: in-neighbours as global
    ids) whose first node has global id `lo`."""
    start, stop = int(rowptr[a]), int(rowptr[b])
    nbr = np.asarray(col[start:stop], dtype=np.int64)
    degree = np.diff(np.asarray(rowptr[a:b + 1], dtype=np.int64))
    inside = (nbr >= lo + a) & (nbr < lo + b)
    other = np.unique(nbr[~inside])
    row = np.empty(len(nbr), dtype=np.int64)
    row[inside] = nbr[inside] - (lo + a)
    row[~inside] = (b - a) + np.searchsorted(other, nbr[~inside])
    return Block(src_gid=np.concatenate([np.arange(lo + a, lo + b, dtype=np.int64), other]), row=row,
                 col=np.repeat(np.arange(b - a, dtype=np.int64), degree), in_degree=degree, n_dst=b - a)


def make_blocks(part: Any, chunk: int) -> list[Block]:
    """This part's own nodes cut into blocks of at most `chunk` targets."""
    n = part.hi - part.lo
    return [make_block(part.rowptr, part.col, part.lo, a, min(a + chunk, n)) for a in range(0, n, chunk)]


def gcn_inv_sqrt_degree(rowptr: np.ndarray, col: np.ndarray, lo: int) -> np.ndarray:
    """float32 [n]: deg^-1/2 of each own node as PyG's `gcn_norm` computes it on the whole graph: in-edges
    other than self-loops, plus the one self-loop `add_remaining_self_loops` gives every node."""
    n = len(rowptr) - 1
    own = np.repeat(np.arange(lo, lo + n, dtype=np.int64), np.diff(rowptr))
    loops = np.bincount(own[np.asarray(col) == own] - lo, minlength=n)
    degree = torch.from_numpy((np.diff(rowptr) - loops + 1).astype(np.float32))
    return degree.pow(-0.5).numpy()


class LayerStack:
    """The layers of a node encoder, applied one at a time to a block: `SampledGNN` (sage, gat, gcn) and PyG's
    `GCN` (checkpoints of earlier versions load into either), with the weights it holds, in eval mode (no
    dropout)."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        from torch_geometric.nn.models import GCN

        encoder = getattr(encoder, "module", encoder)
        if isinstance(encoder, SampledGNN):
            self.kind = encoder.kind
        elif isinstance(encoder, GCN):
            if getattr(encoder, "jk_mode", None) is not None or hasattr(encoder, "lin"):
                raise ConfigError("exact inference expects mpignn's GCN (no jumping knowledge, no final linear "
                                  "layer); got another. HINT: predict a model built by python -m mpignn.train")
            self.kind = "gcn"
        else:
            raise ConfigError(f"exact inference takes --model sage, gat or gcn on a homogeneous graph; got "
                              f"{type(encoder).__name__}. HINT: heterogeneous models are not supported by "
                              "python -m mpignn.predict yet")
        self.encoder = encoder.eval()
        self.num_layers = len(encoder.convs)

    @property
    def needs_degrees(self) -> bool:
        """GCN weighs each edge by both ends' degrees (the sources' come from their owners)."""
        return self.kind == "gcn"

    def apply(self, layer: int, x: torch.Tensor, block: dict[str, Any]) -> torch.Tensor:
        """Layer `layer` on sources `x` ([n_src, F], targets first) -> targets' rows, with the activation
        between layers (none after the last). `block`: `to_device` of a Block."""
        conv, n_dst = self.encoder.convs[layer], block["n_dst"]
        if self.kind == "sage":  # SAGEConv(mean, root weight): lin_l(mean of in-neighbours) + lin_r(self)
            adj = MeanAdjacency(block["row"], block["col"], n_dst, x.size(0), block["in_degree"])
            out = conv.lin_l(adj.mean(x)) + conv.lin_r(x[:n_dst])
        elif self.kind == "gat":  # PyG's GATConv itself (it removes self-loops and adds one per target)
            out = conv((x, x[:n_dst]), block["edge_index"], size=(x.size(0), n_dst))
        else:  # GCNConv: lin, then sum of deg^-1/2(src) deg^-1/2(dst) x_src over edges and the self-loop, bias
            h = conv.lin(x)
            out = h[:n_dst] * block["loop_weight"].unsqueeze(1)
            out.index_add_(0, block["col"], h[block["row"]] * block["edge_weight"].unsqueeze(1))
            if conv.bias is not None:
                out = out + conv.bias
        if layer == self.num_layers - 1:
            return out
        if self.kind != "gcn" or isinstance(self.encoder, SampledGNN):
            return torch.relu(out)
        enc = self.encoder
        if enc.act is not None and enc.act_first:
            out = enc.act(out)
        out = enc.norms[layer](out)
        return enc.act(out) if enc.act is not None and not enc.act_first else out


def to_device(block: Block, device: Any, inv_sqrt: Callable[[np.ndarray], np.ndarray] | None) -> dict[str, Any]:
    """A block's index tensors on `device`; with `inv_sqrt` (gid -> deg^-1/2) GCN's edge weights too, self-loop
    edges dropped (PyG's gcn_norm replaces them by one loop per node)."""
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    row, col = block.row, block.col
    out: dict[str, Any] = {"n_dst": block.n_dst}
    if inv_sqrt is not None:
        keep = row != col
        row, col = row[keep], col[keep]
        d = inv_sqrt(block.src_gid)
        out["edge_weight"] = t(d[row] * d[col])
        out["loop_weight"] = t(d[:block.n_dst] * d[:block.n_dst])
    out.update(row=t(row), col=t(col), in_degree=t(block.in_degree))
    out["edge_index"] = torch.stack([out["row"], out["col"]])
    return out


def make_store(table: np.ndarray, part: Any, comm: Any, alltoall: Any) -> FeatureStore:
    """A FeatureStore over one layer's own rows (labels unused)."""
    dummy = np.zeros(len(table), dtype=np.int8)
    if comm is None or comm.size == 1:
        return FeatureStore(table, dummy, part.lo)
    return FeatureStore(table, dummy, part.lo, np.asarray(part.meta.part_offsets), comm, alltoall)


def input_table(x: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Layer 0's own rows as float32: the (transformed) features, bf16 bit patterns and fp16 widened as the
    loader widens them, then the learnable rows (`rows`) when the run had them."""
    if x.dtype == np.uint16:  # bfloat16 bits (data.features): the upper half of a float32
        x = (np.asarray(x).astype(np.uint32) << 16).view(np.float32)
    if rows is None:
        return x if x.dtype == np.float32 else np.asarray(x, dtype=np.float32)
    return np.concatenate([np.asarray(x, dtype=np.float32), np.asarray(rows, dtype=np.float32)], axis=1)


def run_layers(comm: Any, part: Any, stack: LayerStack, table: np.ndarray, *, chunk: int, device: Any,
               alltoall: Any, keep: tuple[int, ...] = ()) -> dict[int, np.ndarray]:
    """Collective over `comm` (every rank, the same number of exchanges per layer): apply every layer to
    every own node; returns {layer: own rows [n_own, F]} of the last layer and of the layers in `keep` (0:
    `table`, the input rows).

    Args:
        table: layer 0's own rows (`input_table`), float32.
        chunk: target nodes per block; a block's sources (targets and in-neighbours) are fetched at once.
        alltoall: the rows' transport (`exchange.alltoall.make_alltoall`).
    """
    blocks = make_blocks(part, chunk)
    steps = int(allreduce_max(comm, [len(blocks)])[0]) if comm is not None else len(blocks)
    inv_sqrt = None
    if stack.needs_degrees:
        own = gcn_inv_sqrt_degree(part.rowptr, part.col, part.lo)
        halo = np.asarray(part.halo_gid, dtype=np.int64)
        halo_d = make_store(own[:, None], part, comm, alltoall).gather(halo)[0][:, 0]  # collective
        inv_sqrt = lambda gid: _lookup(gid, part.lo, own, halo, halo_d)  # noqa: E731
    kept = {0: table} if 0 in keep else {}
    fetched = 0
    t0 = time.perf_counter()
    for layer in range(stack.num_layers):
        store = make_store(table, part, comm, alltoall)
        out: np.ndarray | None = None
        for step in range(steps):
            ids = blocks[step].src_gid if step < len(blocks) else np.empty(0, dtype=np.int64)
            rows = store.gather(ids)[0]  # collective: the sources' rows, own ones local
            if step >= len(blocks):
                continue
            block = blocks[step]
            x = torch.from_numpy(rows).to(device)
            with torch.no_grad():
                y = stack.apply(layer, x, to_device(block, device, inv_sqrt)).float().cpu().numpy()
            if out is None:
                out = np.empty((part.hi - part.lo, y.shape[1]), dtype=np.float32)
            start = block.src_gid[0] - part.lo
            out[start:start + block.n_dst] = y
        if out is None:  # a part without nodes: the width of the layer's output
            width = _out_width(stack, layer, table.shape[1], device)
            out = np.empty((0, width), dtype=np.float32)
        fetched += store.bytes_received
        table = out
        if layer + 1 in keep:
            kept[layer + 1] = table
    kept[stack.num_layers] = table
    total = allreduce_sum(comm, [fetched])[0] if comm is not None else fetched
    log.info("%d layers over %d blocks per rank in %.4fs, %.1f MiB of rows fetched", stack.num_layers, steps,
             time.perf_counter() - t0, total / 2**20)
    return kept


def exact_outputs(rt: Any, graph: Any, encoder: torch.nn.Module, *,
                  chunk: int = 8192) -> tuple[np.ndarray, Any, FeatureStore]:
    """Collective over `rt.comm` where the ranks hold parts: `encoder`'s last-layer rows of this rank's own
    nodes by exact inference with a training run's weights (`--eval full`), in eval mode.

    Returns:
        (rows [n_own, F], the communicator the rows are exchanged over (None: one rank, or every rank holds
        the whole graph), a FeatureStore over `rows` to fetch any node's row).

    Raises:
        ConfigError: on every rank alike, a model exact inference does not know.
    """
    try:
        stack = LayerStack(encoder)
    except ConfigError as exc:  # the same model on every rank
        raise mark_agreed(exc) from None
    part = graph.part
    comm = rt.comm if rt.world_size > 1 and not graph.replicated else None
    alltoall = graph.features.alltoall if comm is not None else None
    rows = graph.embedding.weight if graph.embedding is not None else None
    out = run_layers(comm, part, stack, input_table(part.x, rows), chunk=chunk, device=rt.device,
                     alltoall=alltoall)[stack.num_layers]
    return out, comm, make_store(out, part, comm, alltoall)


def _lookup(gid: np.ndarray, lo: int, own: np.ndarray, halo: np.ndarray, halo_d: np.ndarray) -> np.ndarray:
    """deg^-1/2 of any source of this rank's blocks: its own nodes' or its halo's (fetched once)."""
    inside = (gid >= lo) & (gid < lo + len(own))
    d = np.empty(len(gid), dtype=np.float32)
    d[inside] = own[gid[inside] - lo]
    d[~inside] = halo_d[np.searchsorted(halo, gid[~inside])]
    return d


def _out_width(stack: LayerStack, layer: int, width: int, device: Any) -> int:
    """Output width of `layer` (an empty part computes nothing): one zero row through it."""
    block = Block(np.zeros(1, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64),
                  np.zeros(1, dtype=np.int64), 1)
    x = torch.zeros((1, width), device=device)
    with torch.no_grad():
        return int(stack.apply(layer, x, to_device(block, device, (lambda g: np.ones(len(g), np.float32))
                                                   if stack.needs_degrees else None)).shape[1])
