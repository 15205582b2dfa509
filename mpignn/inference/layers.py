"""The layers exact inference applies one at a time (`LayerStack`) on a block; refuses, in one line with a
HINT, what it cannot walk exactly.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from mpignn.errors import ConfigError
from mpignn.models import HeteroGNN, SampledGNN
from mpignn.models.aggregate import MeanAdjacency

__all__ = ["LayerStack", "unwrap"]

WALKS = ("PyG's GraphSAGE, GCN, GAT or GIN, a module whose forward applies an activation between the convs of "
         "its .convs ModuleList, or mpignn's --model sage, gat or gcn (a heterogeneous graph: sage or rgcn)")
"""What `LayerStack` walks, as its refusals name it."""

# Aggregations whose result depends on the order of a node's neighbours: a block lists them in another order
# than the whole graph's edge_index.
_ORDERED = ("LSTMAggregation", "GRUAggregation", "SortAggregation", "MLPAggregation", "SetTransformerAggregation",
            "PatchTransformerAggregation")
# PyG norms that normalise over the nodes of a batch (graph), which a block is not.
_OVER_NODES = ("InstanceNorm", "GraphNorm", "GraphSizeNorm", "PairNorm", "MeanSubtractionNorm", "DiffGroupNorm",
               "HeteroLayerNorm", "HeteroBatchNorm")
_PER_NODE = "node"  # PyG LayerNorm's mode that normalises each node alone ("graph", its default, does not)


class LayerStack:
    """The layers of a node encoder (`WALKS`), applied one at a time to a block in eval mode; DDP is unwrapped.
    Convs: SAGEConv (order-free aggregations), GCNConv (whole-graph normalisation), GATConv, GATv2Conv, GINConv.
    A model or configuration the walk would not compute exactly is a ConfigError.
    """

    def __init__(self, encoder: torch.nn.Module, act: str | Callable[[torch.Tensor], torch.Tensor] | None = None
                 ) -> None:
        from torch_geometric.nn.models.basic_gnn import BasicGNN

        encoder = unwrap(encoder)
        name = type(encoder).__name__
        convs = getattr(encoder, "convs", None)
        if not isinstance(convs, torch.nn.ModuleList) or len(convs) == 0:
            raise ConfigError(f"exact inference walks {WALKS}; got {name}, which has no .convs ModuleList. "
                              "HINT: keep its convs in self.convs = torch.nn.ModuleList([...]), applied in order")
        own = isinstance(encoder, (SampledGNN, HeteroGNN, BasicGNN))
        if act is not None and own:
            raise ConfigError(f"act= names the activation of a module whose forward inference cannot read; {name} "
                              "carries its own. HINT: leave act out")
        self.node_types: tuple[str, ...] = ("",)
        self.plans: list[dict[int, tuple[Any, list[tuple[int, Any]]]]] | None = None
        self.act: Callable[[torch.Tensor], torch.Tensor] | None = torch.relu
        self.act_first, self.norms, self.head, self.after_last = False, None, None, False
        self.residuals: torch.nn.ModuleList | None = None
        if isinstance(encoder, SampledGNN):  # conv, + residual(input), norm, ReLU (models.sampled); its head
            self.norms, self.residuals = encoder.norms, encoder.residuals
            self.head, self.after_last = encoder.head, encoder.head is not None
        if isinstance(encoder, HeteroGNN):
            self.node_types, self.plans = encoder.node_types, _hetero_plans(encoder)
            self.steps = ["hetero"] * len(convs)
        else:
            self.steps = [_step(conv, layer) for layer, conv in enumerate(convs)]
        if isinstance(encoder, BasicGNN):
            jk = getattr(encoder, "jk_mode", None)
            if jk not in (None, "last"):
                raise ConfigError(f"exact inference walks a basic GNN's layers one at a time; {name} has jk='{jk}', "
                                  "which reads every layer's rows at once. HINT: build it with jk=None or jk='last'")
            self.act, self.act_first, self.norms = encoder.act, encoder.act_first, encoder.norms
            self.head, self.after_last = getattr(encoder, "lin", None), jk is not None
        elif not own:
            _check_plain(encoder, name)
            self.act = _resolve(act)
        _check_modules(encoder, name)
        self.encoder = encoder.eval()
        self.num_layers = len(convs)
        self.dtype = next((p.dtype for p in encoder.parameters()), torch.float32)

    @property
    def hetero(self) -> bool:
        return self.plans is not None

    def rows_at(self, layer: int) -> frozenset[int]:
        """Node types whose rows table `layer` holds (0: the inputs, every type; L: the last layer's)."""
        if layer == 0 or self.plans is None:
            return frozenset(range(len(self.node_types)))
        return frozenset(self.plans[layer - 1])

    @property
    def needs_degrees(self) -> bool:
        """GCN weighs each edge by both ends' degrees (the sources' come from their owners)."""
        return "gcn" in self.steps

    def in_width(self) -> int | None:
        """The width of the rows the first conv takes (None: a heterogeneous model, or not known)."""
        if self.plans is not None:
            return None
        for module in self.encoder.convs[0].modules():  # the conv itself, else (GINConv) its MLP's first layer
            width = getattr(module, "in_features", getattr(module, "in_channels", None))
            width = width[0] if isinstance(width, (tuple, list)) else width
            if isinstance(width, int):
                return width
        return None

    def apply(self, layer: int, x: torch.Tensor, block: dict[str, Any]) -> torch.Tensor:
        """Layer `layer` on sources `x` (targets first) -> targets' rows, with what the forward does after it."""
        conv, n_dst, step = self.encoder.convs[layer], block["n_dst"], self.steps[layer]
        x = x if x.dtype == self.dtype else x.to(self.dtype)
        if step == "hetero":
            return self._after(layer, self._apply_hetero(layer, x, block))
        if step == "mean":  # SAGEConv(mean, root weight): lin_l(mean of in-neighbours) + lin_r(self)
            adj = MeanAdjacency(block["row"], block["col"], n_dst, x.size(0), block["in_degree"])
            out = conv.lin_l(adj.mean(x)) + conv.lin_r(x[:n_dst])
        elif step == "gcn":  # GCNConv: lin, then sum of deg^-1/2(src) deg^-1/2(dst) x_src over edges and the loop, bias
            h = conv.lin(x)
            out = h[:n_dst] * block["loop_weight"].to(h.dtype).unsqueeze(1)
            out.index_add_(0, block["col"], h[block["row"]] * block["edge_weight"].to(h.dtype).unsqueeze(1))
            if conv.bias is not None:
                out = out + conv.bias
        elif step == "pyg":  # PyG's conv itself on the bipartite block (GAT: drops self-loops, adds one per target)
            out = conv((x, x[:n_dst]), block["edge_index"], size=(x.size(0), n_dst))
        else:  # "pyg-pair": a conv without `size` (GATv2Conv) reads it from the pair
            out = conv((x, x[:n_dst]), block["edge_index"])
        if self.residuals is not None:  # the targets' own input rows: the block's first n_dst sources
            out = out + self.residuals[layer](x[:n_dst])
        return self._after(layer, out)

    def _after(self, layer: int, out: torch.Tensor) -> torch.Tensor:
        last = layer == self.num_layers - 1
        if last and not self.after_last:
            return out
        if self.act is not None and self.act_first:
            out = self.act(out)
        if self.norms is not None:
            out = self.norms[layer](out)
        if self.act is not None and not self.act_first:
            out = self.act(out)
        return self.head(out) if last and self.head is not None else out

    def _apply_hetero(self, layer: int, x: torch.Tensor, block: dict[str, Any]) -> torch.Tensor:
        """`HeteroGNN`'s layer for a block of one node type; inputs cut to each weight's width (layer 0 is padded)."""
        root, convs = self.plans[layer][block["dst_type"]]
        n_dst = block["n_dst"]
        out = root(_cols(x[:n_dst], root)) if root is not None else None
        for e, conv in convs:
            keep = block["edge_type"] == e
            adj = MeanAdjacency(block["row"][keep], block["col"][keep], n_dst, x.size(0),
                                block["type_degree"][:, e].contiguous())
            y = conv.lin_l(adj.mean(_cols(x, conv.lin_l)))
            if conv.root_weight:
                y = y + conv.lin_r(_cols(x[:n_dst], conv.lin_r))
            out = y if out is None else out + y
        return out

    def out_width(self, layer: int) -> int:
        """A heterogeneous layer's output width (every type's is the same)."""
        root, convs = next(iter(self.plans[layer].values()))
        return int((root if root is not None else convs[0][1].lin_l).weight.shape[0])


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a wrapper that keeps it as `.module` (DistributedDataParallel), else `model`."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) and not hasattr(model, "convs") else model


def _step(conv: torch.nn.Module, layer: int) -> str:
    """How layer `layer`'s conv runs on a block: "mean", "gcn", "pyg" or "pyg-pair" (a forward without `size`)."""
    from torch_geometric.nn import GATConv, GATv2Conv, GCNConv, GINConv, SAGEConv

    name = type(conv).__name__
    if isinstance(conv, SAGEConv):
        aggr = type(conv.aggr_module).__name__
        if aggr in _ORDERED:
            raise ConfigError(f"exact inference needs aggregations that ignore the neighbours' order; convs[{layer}] "
                              f"aggregates with {aggr}. HINT: aggr='mean', 'sum' or 'max'")
        plain = aggr == "MeanAggregation" and conv.root_weight and not conv.project and not conv.normalize
        return "mean" if plain else "pyg"
    if isinstance(conv, GCNConv):
        if conv.improved or not conv.add_self_loops or not conv.normalize:
            raise ConfigError(f"exact inference computes GCNConv's gcn_norm with one self-loop per node; "
                              f"convs[{layer}] has improved={conv.improved}, add_self_loops={conv.add_self_loops}, "
                              f"normalize={conv.normalize}. HINT: GCNConv's defaults")
        return "gcn"
    if isinstance(conv, (GATConv, GATv2Conv, GINConv)):
        return "pyg" if "size" in inspect.signature(conv.forward).parameters else "pyg-pair"
    raise ConfigError(f"exact inference knows SAGEConv, GCNConv, GATConv, GATv2Conv and GINConv; convs[{layer}] is "
                      f"{name}. HINT: build the model from those (PyG's GraphSAGE, GCN, GAT or GIN)")


def _check_plain(encoder: torch.nn.Module, name: str) -> None:
    """The walk applies a user module's convs and `act` only: any other weights would be left out silently."""
    for child, module in encoder.named_children():
        if child != "convs" and any(True for _ in module.parameters()):
            raise ConfigError(f"exact inference applies a {name}'s convs and the activation between them only; its "
                              f"'{child}' ({type(module).__name__}) has weights the walk would leave out. HINT: use "
                              "PyG's GraphSAGE/GCN/GAT/GIN (norm=, jk='last'), or apply the rest to inference()'s rows")


def _check_modules(encoder: torch.nn.Module, name: str) -> None:
    """Refuse what a block cannot reproduce: weights not made yet, norms over a batch's nodes."""
    from torch.nn.parameter import UninitializedParameter

    if any(isinstance(p, UninitializedParameter) for p in encoder.parameters()):
        raise ConfigError(f"exact inference needs the model's weights; {name} has lazy ones not made yet "
                          "(in_channels=-1). HINT: run one batch through it first, or give in_channels")
    for path, module in encoder.named_modules():
        kind = type(module).__name__
        over_nodes = (type(module).__module__.startswith("torch_geometric.nn.norm") and kind in _OVER_NODES
                      or isinstance(module, torch.nn.modules.instancenorm._InstanceNorm)
                      or kind == "LayerNorm" and getattr(module, "mode", _PER_NODE) != _PER_NODE
                      or isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and not module.track_running_stats)
        if over_nodes:
            raise ConfigError(f"exact inference computes each node alone; {name}.{path} ({kind}) normalises over the "
                              "nodes of a batch. HINT: norm='batch_norm' (running statistics) or "
                              "norm='layer_norm' with norm_kwargs={'mode': 'node'}")


def _resolve(act: str | Callable[[torch.Tensor], torch.Tensor] | None) -> Callable[[torch.Tensor], torch.Tensor]:
    if act is None:
        return torch.relu
    if isinstance(act, str):
        from torch_geometric.nn.resolver import activation_resolver

        try:
            return activation_resolver(act)
        except ValueError:
            raise ConfigError(f"act= expects an activation PyG knows or a callable; got '{act}'. "
                              "HINT: act='relu' or act=torch.nn.functional.elu") from None
    if not callable(act):
        raise ConfigError(f"act= expects an activation PyG knows or a callable; got {act!r}. HINT: act='relu'")
    return act


def _cols(x: torch.Tensor, linear: torch.nn.Module) -> torch.Tensor:
    width = int(linear.weight.shape[1])
    return x if x.size(1) == width else x[:, :width].contiguous()


def _hetero_plans(encoder: HeteroGNN) -> list[dict[int, tuple[Any, list[tuple[int, Any]]]]]:
    """Per layer, {node type: (root or None, [(edge type, conv)])} as `HeteroGNN.forward` computes them."""
    index = {t: k for k, t in enumerate(encoder.node_types)}
    have = set(index.values())
    plans = []
    for layer in range(encoder.num_layers):
        plan: dict[int, tuple[Any, list[tuple[int, Any]]]] = {
            index[t]: (root, []) for t, root in encoder.roots[layer].items()}
        for e, (src, rel, dst) in enumerate(encoder.edge_types):
            key = "__".join((src, rel, dst))
            if key in encoder.convs[layer] and index[src] in have:
                plan.setdefault(index[dst], (None, []))[1].append((e, encoder.convs[layer][key]))
        plans.append(plan)
        have = set(plan)
    return plans
