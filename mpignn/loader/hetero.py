"""A sampled batch of a heterogeneous graph as PyG's `HeteroData`, cut by node type and edge type; within each
type nodes keep the batch order, so seeds come first and `num_sampled_nodes` / `num_sampled_edges` stay per hop.
Imports torch and torch-geometric; never the training loop.
"""
from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import HeteroData

from mpignn.data.hetero import HeteroSchema, type_of
from mpignn.launch.device import pinned_empty
from mpignn.exchange.features import device_index

__all__ = ["HeteroLayout"]


class HeteroLayout:
    """How to cut a batch of global ids by type (`starts`, `kinds`: `PartitionMeta.type_blocks`)."""

    def __init__(self, schema: HeteroSchema, starts: np.ndarray, kinds: np.ndarray) -> None:
        self.schema, self.starts, self.kinds = schema, np.asarray(starts), np.asarray(kinds)
        self.target = schema.type_index(schema.target)

    def seed_store(self, seed_type: int | None) -> str:
        """The node type whose store holds a batch's seeds: the labelled one unless `seed_type` names another."""
        return self.schema.node_types[self.target if seed_type is None else seed_type]

    def local_ids(self, n_id: np.ndarray) -> np.ndarray:
        """Each batch node's index within its type's store (what a type's `edge_index` holds)."""
        return self._local(self.node_types(n_id))[0]

    def _local(self, ntype: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        order = np.argsort(ntype, kind="stable")
        per_type = np.bincount(ntype, minlength=len(self.schema.node_types))
        local = np.empty(len(ntype), dtype=np.int64)
        local[order] = np.arange(len(ntype)) - np.repeat(np.cumsum(per_type) - per_type, per_type)
        return local, order, per_type

    def node_types(self, gids: np.ndarray) -> np.ndarray:
        return type_of(gids, self.starts, self.kinds)

    def split(self, x: torch.Tensor, y: torch.Tensor, n_id: np.ndarray, row: np.ndarray, col: np.ndarray,
              edge_type: np.ndarray, num_sampled_nodes: list[int], num_sampled_edges: list[int],
              batch_size: int, device: str | torch.device = "cpu",
              dataset_ids: np.ndarray | None = None, seed_type: int | None = None) -> HeteroData:
        """The batch by type; featureless types get a constant one-column input (learnable rows replace it).

        For an accelerator `device` a host x is cut into pinned buffers, so the copy is asynchronous. With
        `dataset_ids`, each type's `n_id` is its dataset id within the type and `part_n_id` its partition id."""
        schema, hops, seeds = self.schema, len(num_sampled_edges), self.target if seed_type is None else seed_type
        ntype = self.node_types(n_id)
        node_hop = np.repeat(np.arange(hops + 1), num_sampled_nodes)
        edge_hop = np.repeat(np.arange(hops), num_sampled_edges)
        local, order, per_type = self._local(ntype)
        data = HeteroData()
        for k, (name, idx) in enumerate(zip(schema.node_types, np.split(order, np.cumsum(per_type)[:-1]))):
            store = data[name]
            dim = schema.feature_dims[k]
            store.x = _rows(x, idx, dim, device) if dim else pinned_empty((len(idx), 1), torch.float32, device).fill_(1)
            store.n_id = torch.from_numpy(n_id[idx])
            if dataset_ids is not None:
                store.part_n_id = store.n_id
                store.n_id = torch.from_numpy(dataset_ids[idx] - schema.offsets[k])
            store.num_sampled_nodes = np.bincount(node_hop[idx], minlength=hops + 1).tolist()
            if k == self.target:
                store.y = y[torch.from_numpy(idx)]
            if k == seeds:
                store.batch_size = batch_size
        for e, (src, rel, dst) in enumerate(schema.edge_types):
            m = np.flatnonzero(edge_type == e)
            store = data[src, rel, dst]
            store.edge_index = pinned_empty((2, len(m)), torch.int64, device)  # plain memory on a CPU
            store.edge_index[0].numpy()[:], store.edge_index[1].numpy()[:] = local[row[m]], local[col[m]]
            store.num_sampled_edges = np.bincount(edge_hop[m], minlength=hops).tolist()
        # What the training loop reads of any batch: the seeds' count and labels, every node's global id.
        data.batch_size = batch_size
        data.y = data[schema.target].y
        if dataset_ids is None:
            data.n_id = torch.from_numpy(n_id)
        else:
            data.part_n_id = torch.from_numpy(n_id)
        data.featureless = [t for t, d in zip(schema.node_types, schema.feature_dims) if not d]
        return data


def _rows(x: torch.Tensor, idx: np.ndarray, dim: int, device: str | torch.device) -> torch.Tensor:
    """x[idx, :dim] in x's dtype: on x's device, in a pinned buffer for an accelerator, else plain."""
    if x.device.type != "cpu":
        return torch.index_select(x[:, :dim], 0, device_index(idx, x.device))
    out = pinned_empty((len(idx), dim), x.dtype, device)
    return torch.index_select(x[:, :dim], 0, torch.from_numpy(idx), out=out)
