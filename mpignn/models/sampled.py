"""A GNN for sampled mini-batches that computes, at each layer, only the rows the next layer reads: unlike
PyG's `trim_to_layer`, no conv makes rows of the outermost hop. SAGE's mean is one CSR product
(`models.aggregate`); PyG's outputs (tests/test_models.py). Gains: docs/launchers-and-devices.md, "Models".
"""
from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import torch

from mpignn.models.aggregate import MeanAdjacency
from mpignn.models.dropout import activated_halo, relu_dropout
from mpignn.models.norm import make_norm, make_residual
from mpignn.models.sparse_input import column_major, sage_sparse_input, sparse_projection

__all__ = ["SampledGNN", "encode"]


class SampledGNN(torch.nn.Module):
    """GraphSAGE, GAT (4 heads) or GCN (as PyG's GCN with per-hop trimming) over (x, edge_index, per-hop counts).
    `linear_head`: hidden-wide convs and one linear layer to `out_channels`, the classic baselines' shape
    (Luo et al. 2024)."""

    def __init__(self, kind: str, in_channels: int, hidden: int, out_channels: int, num_layers: int,
                 dropout: float = 0.0, heads: int = 4, *, norm: str = "none", residual: bool = False,
                 linear_head: bool = False) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv, GCNConv, SAGEConv

        self.kind, self.dropout, self.num_layers, self.heads = kind, dropout, num_layers, heads
        self.convs = torch.nn.ModuleList()
        self.widths: list[tuple[int, int]] = []  # (input, output) features of each layer
        for layer in range(num_layers):
            last = layer == num_layers - 1 and not linear_head  # the conv whose rows are the outputs
            c_in = in_channels if layer == 0 else hidden
            c_out = out_channels if last else hidden
            if kind == "sage":
                self.convs.append(SAGEConv((c_in, c_in), c_out))
            elif kind == "gat":
                per_head = c_out if last else max(1, hidden // heads)
                self.convs.append(GATConv((c_in, c_in), per_head, heads=1 if last else heads, concat=not last))
                c_out = per_head if last else per_head * heads
            elif kind == "gcn":
                self.convs.append(GCNConv(c_in, c_out))
            else:
                raise ValueError(f"unknown kind {kind}")
            self.widths.append((c_in, c_out))
        # --norm: after each hidden layer (its residual added), before the ReLU; the last conv's rows, where they
        # are the task's (logits, embeddings), stay as the conv and its residual give them
        self.norms = None if norm == "none" else torch.nn.ModuleList(
            make_norm(norm, c_out) for _, c_out in (self.widths if linear_head else self.widths[:-1]))
        # --residual: every layer, the input itself where the widths agree, else a projection
        self.residuals = torch.nn.ModuleList(make_residual(*w) for w in self.widths) if residual else None
        self.head = torch.nn.Linear(self.widths[-1][1], out_channels) if linear_head else None
        if kind == "sage":  # the layer that may read sparse input rows (`sparse_input`)
            column_major(self.convs[0].lin_l)
            column_major(self.convs[0].lin_r)

    def activation_bytes(self, rows: int, edges: int, input_itemsize: int = 4) -> int:
        """An upper bound on a step's activations and gradients with `rows` rows and `edges` edges per layer,
        to refuse a full-graph step that cannot fit before it runs."""
        total = 0
        for layer, (c_in, c_out) in enumerate(self.widths):
            itemsize = input_itemsize if layer == 0 else 4
            total += rows * c_in * (itemsize + 4 + 4) + 3 * rows * c_out * 4  # table, aggregation, its gradient
            if self.kind in ("gat", "gcn"):
                total += 2 * edges * (c_out + self.heads) * 4
        return total

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, num_sampled_nodes: Sequence[int],
                num_sampled_edges: Sequence[int], in_degree: torch.Tensor | None = None,
                halo: Any = None, whole: Any = None, mean_over: torch.Tensor | None = None,
                edge_weight: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the seed nodes (the first num_sampled_nodes[0] rows).

        Args:
            in_degree: the sampler's per-target edge counts; it vouches edges are grouped by target, so no host
                read is needed (without it, e.g. PyG's NeighborLoader, edges are checked and sorted here).
            halo: a cooperative batch's `exchange.halo.Halo`: `x` holds own rows; the halo adds the others'.
            whole: `--minibatch full`'s `WholeNeighbourhoods`: GCN takes whole-graph degrees, SAGE sparse input.
            mean_over: a layer-neighbour batch's expected in-edge counts (GAT's attention needs none: each
                neighbour is kept with the same probability).
            edge_weight: LABOR-i's importance weights (GAT refuses them).
        """
        if edge_weight is not None and self.kind == "gat":
            raise ValueError("GAT's attention takes no edge weights (LABOR-i batches): use sage or gcn")
        hops = len(num_sampled_edges)
        if hops != self.num_layers:
            raise ValueError(f"batch sampled {hops} hops for a {self.num_layers}-layer model")
        if self.kind == "sage" and in_degree is None:
            edge_index = _sorted_by_target(edge_index)
        # cooperative: a hidden layer's activation writes straight into the next layer's table (GCN scales its
        # rows between the two, so it keeps the copy)
        fused = halo is not None and self.kind != "gcn"
        for layer, conv in enumerate(self.convs):
            keep = hops - layer  # hops still needed as targets after this layer: 0..keep-1
            n_dst, n_src = int(sum(num_sampled_nodes[:keep])), int(sum(num_sampled_nodes[:keep + 1]))
            n_edges = int(sum(num_sampled_edges[:keep]))
            hidden = layer < self.num_layers - 1 or self.head is not None
            src, dst = edge_index[0, :n_edges], edge_index[1, :n_edges]
            weights = None if edge_weight is None else edge_weight[:n_edges]
            root = x  # the layer's input rows, targets first: its residual reads them (before GCN's scaling)
            sparse = self._sparse_rows(x, layer, whole, halo, n_src, n_dst)
            if self.kind == "gcn":  # each source row scaled by its deg^-1/2 before it may cross to other ranks
                x, inv_sqrt, weight = _gcn_scaled(x, n_src, n_dst, src, dst,
                                                  whole.degree if whole is not None else None, mean_over, weights)
            if fused and layer > 0:  # the previous layer left x before its activation
                x, src = activated_halo(halo, layer, x, self.dropout, self.training)
                root = x
            elif halo is not None and sparse is not None:  # the products cross, in `sage_sparse_input`
                src = halo.sources(layer, x.device)
            elif halo is not None:
                # a slice of all rows would still cost its backward a zero-filled copy of the gradient; the input
                # may come with room for the remote rows (`Halo.table_rows`)
                x, src = halo(layer, x if len(x) == n_src or layer == 0 else x[:n_src],
                              raw=layer == 0 and self.kind != "gcn")  # GCN's rows were scaled for this batch
                root = root if self.kind == "gcn" else x
            if self.kind == "gcn":
                x = _gcn_sum(conv, x, src, dst, n_dst, inv_sqrt, weight)
            elif self.kind == "sage":
                n_src = halo.table_rows(layer) if sparse is not None and halo is not None else x.size(0)
                # a full-graph batch keeps its mean (its edges never change): built once, not every epoch
                make = partial(MeanAdjacency, src, dst, n_dst, n_src, in_degree, mean_over, weights)
                adj = make() if whole is None else whole.kept(("mean", layer), make)
                if sparse is not None:
                    x = sage_sparse_input(conv, *sparse, halo, adj)
                else:  # no node saves the result, so the activation below may overwrite it
                    x = _SageMean.apply(x, conv.lin_l.weight, conv.lin_l.bias, conv.lin_r.weight, adj, n_dst)
            else:
                pairs = edge_index[:, :n_edges] if halo is None else torch.stack([src, dst])
                x = conv((x, x[:n_dst]), pairs, size=(x.size(0), n_dst))
            if self.residuals is not None:  # a fresh sum: the activation below may still write into it
                x = x + _residual(self.residuals[layer], root, n_dst, None if sparse is None else sparse[1])
            if hidden and self.norms is not None:  # each rank's own rows of the layer (RankBatchNorm: all ranks')
                x = self.norms[layer](x)
            if hidden and (not fused or layer == self.num_layers - 1):  # fused: the next layer's halo does it
                # In place for SAGE: _SageMean's backward needs its inputs, not its output. The fused
                # ReLU + dropout keeps no mask and takes no bernoulli_ draw (docs/training.md, "Defaults and why").
                x = relu_dropout(x, self.dropout, self.training, inplace=self.kind == "sage")
        return x if self.head is None else self.head(x)

    def _sparse_rows(self, x: torch.Tensor, layer: int, whole: Any, halo: Any, n_src: int, n_dst: int) -> Any:
        """SAGE's first full-graph layer: (sources', targets') sparse input rows where sparse, else None."""
        if self.kind != "sage" or whole is None or layer != 0 or x.requires_grad:
            return None
        sources = whole.sparse_rows(x, halo.plans[0].n_own if halo is not None else n_src)
        return None if sources is None else (sources, whole.sparse_rows(x, n_dst))


class _SageMean(torch.autograd.Function):
    """mean(x) @ W_l^T + b_l + x[:n_dst] @ W_r^T as one autograd node (`adj` is a MeanAdjacency).

    x feeds two products, so autograd's own graph would make three [sources x features] gradients; this
    backward writes one.
    """

    @staticmethod
    def forward(ctx, x, weight_l, bias_l, weight_r, adj, n_dst):
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        with torch.autocast(x.device.type, enabled=False):
            xc = x.to(dtype)
            aggr = adj.mean(xc)
            out = torch.addmm(bias_l.to(dtype), aggr, weight_l.to(dtype).t())
            out.addmm_(xc[:n_dst], weight_r.to(dtype).t())
        ctx.save_for_backward(xc, aggr, weight_l, weight_r)
        ctx.adj, ctx.n_dst, ctx.x_dtype = adj, n_dst, x.dtype
        return out

    @staticmethod
    def backward(ctx, grad):
        xc, aggr, weight_l, weight_r = ctx.saved_tensors
        n_dst, dtype = ctx.n_dst, xc.dtype
        grad = grad.to(dtype)
        grad_x = grad_wl = grad_b = grad_wr = None
        if ctx.needs_input_grad[0]:
            grad_x = ctx.adj.mean_t(grad @ weight_l.to(dtype))
            grad_x[:n_dst].addmm_(grad, weight_r.to(dtype))
            grad_x = grad_x.to(ctx.x_dtype)
        if ctx.needs_input_grad[1]:
            grad_wl = _weight_grad(grad, aggr, weight_l)
        if ctx.needs_input_grad[2]:
            grad_b = grad.sum(0).to(weight_l.dtype)
        if ctx.needs_input_grad[3]:
            grad_wr = _weight_grad(grad, xc[:n_dst], weight_r)
        return grad_x, grad_wl, grad_b, grad_wr, None, None


def _weight_grad(grad: torch.Tensor, inputs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """grad^T @ inputs in `weight`'s dtype and layout (column-major: `column_major`), so autograd keeps it."""
    if weight.dim() == 2 and not weight.is_contiguous() and weight.t().is_contiguous():
        return (inputs.t() @ grad).t().to(weight.dtype)
    return (grad.t() @ inputs).to(weight.dtype)


def _residual(branch: torch.nn.Module, root: torch.Tensor, n_dst: int, sparse: Any) -> torch.Tensor:
    """A layer's residual branch on its targets' input rows; of sparse input rows as a sparse product."""
    if sparse is None or not isinstance(branch, torch.nn.Linear):
        return branch(root[:n_dst])
    return sparse_projection(branch.weight, sparse)


def _gcn_scaled(x: torch.Tensor, n_src: int, n_dst: int, src: torch.Tensor, dst: torch.Tensor,
                degree: torch.Tensor | None = None, mean_over: torch.Tensor | None = None,
                edge_weight: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(source rows times deg^-1/2, deg^-1/2 per source, each edge's weight, 0 for a sampled self-loop), with
    the degrees PyG's gcn_norm gives the trimmed layer (1 for the outermost hop). Own sources keep their row
    index in every layer, so `src == dst` finds the loops before any exchange. `mean_over` counts min(d, k)
    in-edges, so the layer's expected output is neighbour sampling's (`tests/test_labor.py`)."""
    weight = (src != dst).to(torch.float32)
    if degree is not None:
        deg = degree[:n_src].to(device=x.device, dtype=torch.float32) + 1
    else:
        deg = torch.ones(n_src, dtype=torch.float32, device=x.device)
        if mean_over is None:
            counted = torch.zeros(n_dst, dtype=torch.float32, device=x.device).index_add_(0, dst, weight)
        else:  # less the self-loops kept: merged into the one every node has
            loops = torch.zeros(n_dst, dtype=torch.float32, device=x.device).index_add_(0, dst, 1 - weight)
            counted = mean_over[:n_dst].to(device=x.device, dtype=torch.float32) - loops
        deg[:n_dst] += counted
    inv_sqrt = deg.rsqrt()
    if edge_weight is not None:
        weight = weight * edge_weight.to(device=x.device, dtype=torch.float32)
    return x[:n_src] * inv_sqrt.to(x.dtype).unsqueeze(1), inv_sqrt, weight


def _gcn_sum(conv: torch.nn.Module, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, n_dst: int,
             inv_sqrt: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    h = conv.lin(x)
    out = h[:n_dst].index_add(0, dst, h[src] * weight.to(h.dtype).unsqueeze(1))
    out = out * inv_sqrt[:n_dst].to(out.dtype).unsqueeze(1)
    return out + conv.bias if conv.bias is not None else out


def _sorted_by_target(edge_index: torch.Tensor) -> torch.Tensor:
    """Edges grouped by target, stably, so each hop's edges stay in front of the next's (mpignn's loader's are)."""
    col = edge_index[1]
    if col.numel() < 2 or bool((col[1:] >= col[:-1]).all()):
        return edge_index
    return edge_index[:, torch.argsort(col, stable=True)]


def encode(model: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor, num_sampled_nodes,
           num_sampled_edges, in_degree: torch.Tensor | None = None, halo: Any = None,
           whole: Any = None, mean_over: torch.Tensor | None = None,
           edge_weight: torch.Tensor | None = None) -> torch.Tensor:
    """Output rows of the batch's seed nodes; the extras are `SampledGNN.forward`'s (other models take none)."""
    if isinstance(getattr(model, "module", model), SampledGNN):
        return model(x, edge_index, num_sampled_nodes, num_sampled_edges, in_degree, halo=halo, whole=whole,
                     mean_over=mean_over, edge_weight=edge_weight)
    if halo is not None or mean_over is not None or edge_weight is not None:
        raise ValueError("a cooperative or layer-neighbour batch needs a SampledGNN (--model sage, gat or gcn)")
    out = model(x, edge_index, num_sampled_nodes_per_hop=num_sampled_nodes,
                num_sampled_edges_per_hop=num_sampled_edges)
    return out[:num_sampled_nodes[0]]
