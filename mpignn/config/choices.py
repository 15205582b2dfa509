"""The allowed values of every choice flag, defined once, and the one check of a choice and of --cache-size.
The owners import their tuple from here: config must import without torch. Stdlib only, and mpignn.errors.
"""
from __future__ import annotations

from typing import Any, Sequence

from mpignn.errors import ConfigError

__all__ = ["FEATURE_NORMS", "FEATURE_DTYPES", "PARTITION_METHODS", "DEFAULT_METHOD", "PARTITION_DEFAULT", "MODELS",
           "HETERO_MODELS", "DECODERS", "EXCHANGES", "PREFETCH_MODES", "TASKS", "NEGATIVES", "BATCH_SCOPES", "LR_SCALINGS",
           "PRECISIONS", "EVALS", "MINIBATCHES", "NORMS", "SAMPLERS", "SAMPLE_ON", "FEATURE_DEVICES",
           "check_choice", "parse_cache_size"]

FEATURE_NORMS = ("none", "row")  # data.features.transform_rows
FEATURE_DTYPES = ("fp32", "fp16", "bf16")  # data.features.transform_rows
PARTITION_METHODS = ("metis", "kaminpar", "random")  # partition.assign.assign_parts
DEFAULT_METHOD = "auto"  # partition.assign.default_method resolves it
PARTITION_DEFAULT = "metis"  # the one default of mpignn.train --partition-method and mpignn.partition --method
MODELS = ("sage", "gcn", "gat", "rgcn")  # models.build_model
HETERO_MODELS = ("sage", "rgcn")  # models.hetero.HeteroGNN
NORMS = ("none", "layer", "batch")  # models.norm.make_norm
DECODERS = ("dot", "mlp")  # models.link.LinkModel (tasks.link)
EXCHANGES = ("auto", "mpi", "torch")  # exchange.alltoall.make_alltoall
PREFETCH_MODES = ("auto", "on", "off")  # prefetch.overlap
# The task registry: a new task is a module with a `tasks.base.Task` subclass and one line here.
TASKS = {"node": "mpignn.tasks.node:NodeTask", "link": "mpignn.tasks.link:LinkTask"}
NEGATIVES = ("uniform", "tail")  # tasks.link.LinkSeeds
BATCH_SCOPES = ("global", "rank")  # training.loaders.rank_batch_size
LR_SCALINGS = ("none", "linear", "sqrt")  # schedule.attach_lr_schedule
PRECISIONS = ("auto", "fp32", "bf16")
MINIBATCH_MODES = ("independent", "cooperative", "full")  # training.loaders.make_loader, runtime.NeighborLoader
MINIBATCHES = (*MINIBATCH_MODES, "auto", "tune")  # auto: counted, tune: timed (mpignn.training.minibatch)
EVALS = ("sampled", "exact")  # fit: tasks.base.Task.evaluate_exact
# sampling.neighbor.NeighborSampler's method: "neighbor", each target its own uniform draw (`kernels.sample_rows`);
# "labor", layer-neighbour sampling, one variate per source shared by the hop's targets (`sampling.labor`)
SAMPLERS = ("neighbor", "labor")
SAMPLE_ON = ("auto", "host", "device")  # runtime.graph: numba kernels, or sampling.device_hops
FEATURE_DEVICES = ("auto", "host", "device")  # launch.device.features_on_device


def check_choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    """Return `value` when it is one of `allowed`; ConfigError names the flag `--name` and the first choice."""
    if value not in allowed:
        flag = "--" + name.replace("_", "-")
        raise ConfigError(f"{flag} must be one of {', '.join(allowed)}; got {value!r}. HINT: {flag} {allowed[0]}")
    return value


def parse_cache_size(value: int | str) -> int | str:
    """Return 'auto', or a count of rows (int or digits) as an int >= 0; ConfigError for anything else."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise ConfigError(f"--cache-size must be auto or a row count >= 0; got {value!r}. "
                      "HINT: --cache-size auto (sized by free memory), e.g. --cache-size 50000, or 0 for no cache")
