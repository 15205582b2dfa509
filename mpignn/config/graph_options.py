"""`GraphOptions`: everything `runtime.build_local_graph` needs to know about this rank's graph, in one frozen value.

Made once from the training config (`GraphOptions.from_config(cfg)`) or from keyword arguments (the Python
API); its defaults are `TrainConfig`'s and its checks the ones `TrainConfig` runs on the same flags (`choices`,
`refusals`), so both paths default and refuse alike.
Stdlib only: imports config, choices and errors, never torch or numpy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from mpignn.config.choices import (DEFAULT_METHOD, EXCHANGES, FEATURE_DTYPES, FEATURE_NORMS, PARTITION_METHODS,
                                   FEATURE_DEVICES, SAMPLE_ON, SAMPLERS, check_choice,
                                   parse_cache_size)
from mpignn.config.refusals import check_combinations
from mpignn.config.train_config import TrainConfig, parse_fanout
from mpignn.config.values import check_ranges


__all__ = ["GraphOptions"]


@dataclass(frozen=True, kw_only=True)
class GraphOptions:
    """Where the graph comes from, how it is partitioned, cached, exchanged and transformed, and task extras.

    Raises:
        ConfigError: a value the matching `python -m mpignn.train` flag would refuse (same message).
    """

    # data source
    dataset: str = TrainConfig.dataset
    """A dataset name (`data.KNOWN`)."""
    root: str = TrainConfig.root
    """Folder for datasets, their caches and automatic partitions."""
    splits: str = TrainConfig.splits
    """An npz of node ids `train`, `valid`, `test` replacing the dataset's splits (`data.split_file`); empty: none."""
    # partition
    partitions: str = TrainConfig.partitions
    """A partition folder (`python -m mpignn.partition`); empty: rank 0 partitions under `root/mpignn-parts/`."""
    method: str = TrainConfig.partition_method
    """Partitioner of an automatic partition: metis, kaminpar, random or auto (`TrainConfig.partition_method`)."""
    replicated: bool = TrainConfig.replicated
    """One part holding the whole graph on every rank."""
    seed: int = TrainConfig.seed
    """Seeds the partitioner and the held-out edges of link prediction."""
    local_prep: bool = TrainConfig.local_prep
    """Rank 0 of every host prepares the partition (node-local disks), not rank 0 alone."""
    prep_timeout: float | None = TrainConfig.prep_timeout
    """Seconds the other ranks wait for the preparing rank (None: no bound)."""
    force: bool = TrainConfig.force
    """Partition delivery may replace what is not an mpignn partition folder at the path."""
    # sampling
    fanouts: Sequence[int] = tuple(parse_fanout(TrainConfig.fanout))
    """Neighbours sampled per layer (-1: all)."""
    edge_fanouts: dict[str, Sequence[int]] | None = None
    """Heterogeneous graphs: per edge type fanouts (`data.hetero.hop_fanouts`)."""
    sampler: str = TrainConfig.sampler
    """neighbor or labor (layer-neighbour sampling, `sampling.labor`; homogeneous graphs). Labor batches carry
    `mean_over`: mpignn's models divide by it; a PyG layer's mean ignores it."""
    batch_dependency: int = TrainConfig.batch_dependency
    """labor: K training steps share their variates (`sampling.labor.window`); 1: each step its own."""
    layer_dependency: bool = TrainConfig.layer_dependency
    """labor: every hop of a batch draws a node's one variate (`NeighborSampler`'s `layer_dependency`)."""
    labor_iterations: int = TrainConfig.labor_iterations
    """labor: LABOR-i's importance-sampling iterations (`sampling.labor.labor_importance`); 0: LABOR-0. Batches
    then carry `edge_weight`, which mpignn's SAGE and GCN multiply in."""
    sample_on: str = TrainConfig.sample_on
    """host (numba kernels), device (`sampling.device_hops` on the compute device) or auto (host, for now)."""
    feature_device: str = TrainConfig.feature_device
    """host, device or auto (`launch.device.features_on_device`): where the feature table lives."""
    # cache and exchange
    cache_size: int | str = TrainConfig.cache_size
    """Remote feature rows cached per rank (`cache_policy`): a row count, "auto", or 0 for none."""
    exchange: str = TrainConfig.exchange
    """Feature transport: auto/mpi (MPI on host buffers) or torch (torch.distributed, e.g. NCCL)."""
    # features
    feature_norm: str = TrainConfig.feature_norm
    """none, or row (each row scaled to sum 1), applied by each owner to its rows after loading."""
    feature_dtype: str = TrainConfig.feature_dtype
    """fp32, fp16 or bf16: the table, the cache and the exchange in that dtype (batches arrive as float32)."""
    # task extras
    links: dict[str, Any] | None = field(default=None)
    """What the partitioner holds out, the task's `partition_extras()`: for link prediction {"val", "test",
    "num_tails"} (held-out shares, negatives per held-out edge); None: nothing."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cache_size", parse_cache_size(self.cache_size))
        object.__setattr__(self, "fanouts", tuple(parse_fanout(self.fanouts)))
        check_choice("partition_method", self.method, (*PARTITION_METHODS, DEFAULT_METHOD))
        check_choice("exchange", self.exchange, EXCHANGES)
        check_choice("feature_norm", self.feature_norm, FEATURE_NORMS)
        check_choice("feature_dtype", self.feature_dtype, FEATURE_DTYPES)
        check_choice("sampler", self.sampler, SAMPLERS)
        check_choice("sample_on", self.sample_on, SAMPLE_ON)
        check_choice("feature_device", self.feature_device, FEATURE_DEVICES)
        check_combinations({"feature_device": self.feature_device, "exchange": self.exchange,
                            "partitions": self.partitions, "replicated": self.replicated,
                            "batch_dependency": self.batch_dependency, "sampler": self.sampler,
                            "layer_dependency": self.layer_dependency, "labor_iterations": self.labor_iterations,
                            "sample_on": self.sample_on})
        check_ranges({"batch_dependency": self.batch_dependency, "labor_iterations": self.labor_iterations},
                     {"batch_dependency": 8, "labor_iterations": 3})

    @property
    def link_params(self) -> dict[str, Any] | None:
        """The held-out edges' parameters as the partition stores them (`links` and the seed); None: none."""
        return None if self.links is None else {**self.links, "seed": self.seed}

    @classmethod
    def from_config(cls, cfg: TrainConfig, task: Any) -> "GraphOptions":
        """The graph options of a `config.train_config.TrainConfig` (its flags are checked already) and its `tasks.Task`."""
        return cls(dataset=cfg.dataset, root=cfg.root, splits=cfg.splits, partitions=cfg.partitions,
                   method=cfg.partition_method, replicated=cfg.replicated, seed=cfg.seed, local_prep=cfg.local_prep,
                   prep_timeout=cfg.prep_timeout, force=cfg.force, fanouts=tuple(cfg.fanouts),
                   edge_fanouts=cfg.edge_fanouts or None, sampler=cfg.sampler, sample_on=cfg.sample_on,
                   feature_device=cfg.feature_device,
                   batch_dependency=cfg.batch_dependency, layer_dependency=cfg.layer_dependency,
                   labor_iterations=cfg.labor_iterations,
                   cache_size=cfg.cache_size,
                   exchange=cfg.exchange,
                   feature_norm=cfg.feature_norm, feature_dtype=cfg.feature_dtype, links=task.partition_extras())
