"""`LocalGraph`: one rank's part with its sampler and feature store, the `graph` every layer above takes.
Imports numpy and `errors` at run time; the types it holds are named for the type checker only.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mpignn.errors import ConfigError

if TYPE_CHECKING:
    from mpignn.data.hetero import HeteroSchema
    from mpignn.exchange.embedding import NodeEmbedding
    from mpignn.exchange.features import FeatureStore
    from mpignn.loader.hetero import HeteroLayout
    from mpignn.partition import LocalPart
    from mpignn.sampling.neighbor import NeighborSampler

__all__ = ["LocalGraph", "SPLITS"]

SPLITS = {"train": "train_idx", "val": "val_idx", "test": "test_idx"}
"""Split names and the part arrays that hold their nodes."""


@dataclass(frozen=True)
class LocalGraph:
    """This rank's part and the sampler and feature store built on it (`attach_embedding` returns a new one)."""

    part: LocalPart
    sampler: NeighborSampler
    features: FeatureStore
    replicated: bool
    folder: Path | None  # the partition folder; None for a graph partitioned in memory (load_local_graph(rt, data))
    load_peak_rss_mb: float = 0.0  # this rank's peak memory by the end of start-up (imports, part, cache)
    cache_rows: int = 0  # remote feature rows cached, the most on any rank
    cache_mib: float = 0.0  # their MiB, the most on any rank
    graph_mib: float = 0.0  # memory that depends on the graph (part arrays, one sampling thread's id map, cache)
    task: Any = None  # a `tasks.Task` (a layer above, so not named here): what seeds and the head are for
    task_data: dict | None = None  # this rank's arrays of the task (`Task.local_data`: e.g. held-out edges)
    embedding: NodeEmbedding | None = None  # learnable rows of this rank's nodes (`attach_embedding`)
    layout: HeteroLayout | None = None  # heterogeneous graphs: how batches are cut by type (HeteroData)
    runtime: Any = None  # the `launch.bootstrap.Runtime` it was loaded on: loaders and inference talk on its comm

    @property
    def node_id(self) -> np.ndarray:
        """The dataset's ids of this rank's own nodes (row i of `y` and of `inference`'s output is node_id[i])."""
        return self.part.orig_id

    @property
    def y(self) -> np.ndarray:
        """Labels of this rank's own nodes (-1: unlabelled)."""
        return self.part.y

    def split_mask(self, split: str) -> np.ndarray:
        """Boolean mask over this rank's own nodes: those in `split` ("train", "val" or "test")."""
        mask = np.zeros(self.part.hi - self.part.lo, dtype=bool)
        mask[self._split_rows(split) - self.part.lo] = True
        return mask

    def split_ids(self, split: str) -> np.ndarray:
        """Collective over the runtime's comm (not when replicated): every rank's dataset ids in `split`, sorted."""
        ids = self.node_id[self._split_rows(split) - self.part.lo]
        rt = self.runtime
        if rt is not None and rt.world_size > 1 and not self.replicated:  # each rank's split nodes are its own
            ids = np.concatenate(rt.comm.allgather(ids))
        return np.sort(ids)

    def get_idx_split(self) -> dict[str, Any]:
        """Collective: OGB's `dataset.get_idx_split()`, so OGB scripts run as they are: each whole split on
        every rank (per labelled type on a heterogeneous graph, as OGB's)."""
        import torch  # the loader layer's types are numpy; this one answer is torch's, as OGB's is

        schema, out = self.schema, {}
        first = 0 if schema is None else int(schema.offsets[schema.type_index(schema.target)])
        for key, split in (("train", "train"), ("valid", "val"), ("test", "test")):
            ids = torch.from_numpy(self.split_ids(split) - first)
            out[key] = ids if schema is None else {schema.target: ids}
        return out

    def _split_rows(self, split: str) -> np.ndarray:
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}; got {split!r}. HINT: split_mask('train')")
        return np.asarray(getattr(self.part, SPLITS[split]), dtype=np.int64)

    @property
    def schema(self) -> HeteroSchema | None:
        return self.layout.schema if self.layout is not None else None

    def metadata(self) -> tuple[list[str], list[tuple[str, str, str]]]:
        """(node types, edge types) as PyG's `HeteroData.metadata()` gives them, for `to_hetero(model, ...)`;
        ConfigError on a homogeneous graph (no types)."""
        if self.schema is None:
            raise ConfigError("metadata() lists node and edge types; this graph has one of each. HINT: a "
                              "homogeneous model needs no to_hetero")
        return list(self.schema.node_types), [tuple(e) for e in self.schema.edge_types]

    def in_channels(self) -> int | dict[str, int]:
        """A model's input width: `num_features`, or per node type on a heterogeneous graph."""
        if self.layout is None:
            return self.num_features
        emb = self.embedding.dim if self.embedding is not None else 1
        return {t: d or emb for t, d in zip(self.schema.node_types, self.schema.feature_dims)}

    @property
    def num_classes(self) -> int:
        return self.part.meta.num_classes

    def __repr__(self) -> str:  # PyG's `print(data)`, not the arrays of every field
        rt = self.runtime
        where = f"rank {rt.rank} of {rt.world_size}: " if rt is not None else ""
        return (f"LocalGraph({where}{self.part.hi - self.part.lo} own nodes of {self.part.meta.num_nodes}, "
                f"{self.num_features} features, {self.num_classes} classes)")

    @property
    def num_features(self) -> int:
        """Numbers per node a batch carries: the features, then the learnable rows if any."""
        return self.part.meta.num_features + (self.embedding.dim if self.embedding is not None else 0)
