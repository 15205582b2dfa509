"""Training configuration: one dataclass, its parser, and validation. Stdlib only.

Every default lives in the dataclass; precedence is defaults < `--config file.toml` < flags.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, fields
from typing import Any, Sequence

from mpignn.config.choices import (BATCH_SCOPES, DECODERS, DEFAULT_METHOD, EVALS, EXCHANGES, FEATURE_DTYPES,
                            FEATURE_NORMS, LR_SCALINGS, MINIBATCHES, MODELS, NEGATIVES, NORMS, PARTITION_DEFAULT, PARTITION_METHODS,
                            FEATURE_DEVICES, PRECISIONS, PREFETCH_MODES, SAMPLE_ON, SAMPLERS, TASKS, check_choice,
                            parse_cache_size)
from mpignn.config.refusals import check_combinations
from mpignn.config.values import check_memory, check_ranges, check_types, estimate_step_bytes
from mpignn.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (the default of many clusters' images): tomllib's origin, installed by setup.py there
    import tomli as tomllib

__all__ = ["LINK_DEFAULTS", "REMOVED_FLAGS", "TrainConfig", "add_fields", "build_parser", "check_fits", "field_docs", "parse",
           "parse_fanout", "parse_cache_size"]


def parse_edge_fanout(text: str, layers: int) -> dict[str, list[int]]:
    """`TYPE=F1,F2;TYPE=...` -> {TYPE: fanouts}, each as long as --fanout (checked against the graph's edge
    types once it is loaded: `data.hetero.hop_fanouts`)."""
    out: dict[str, list[int]] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, sep, values = item.partition("=")
        fan = parse_fanout(values) if sep and name.strip() else []
        if len(fan) != layers:
            raise ConfigError(f"--edge-fanout takes TYPE=F1,...,F{layers} (one fanout per layer, as --fanout); "
                              f"got '{item}'. HINT: e.g. --edge-fanout 'actor__to__movie={','.join(['5'] * layers)}'")
        out[name.strip()] = fan
    return out


def parse_fanout(text: str | Sequence[int]) -> list[int]:
    """'15,10,5' -> [15, 10, 5]; -1 means all neighbours."""
    try:
        values = [int(v) for v in (text.split(",") if isinstance(text, str) else text)]
    except ValueError:
        values = []
    if not values or any(v == 0 or v < -1 for v in values):
        raise ConfigError(f"--fanout must list one positive int (or -1 for all) per layer; got '{text}'. "
                          "HINT: use e.g. --fanout 15,10,5")
    return values


# --task link's own defaults where no flag or --config key sets them (docs/training.md "Defaults and why":
# the bare Cora link command reaches test AUC >= 0.86 on 1 and 2 ranks with these). Dropout and weight decay
# stay off there: the link numbers were measured without them.
LINK_DEFAULTS: dict[str, Any] = {"feature_norm": "row", "epochs": 100, "fanout": "10,10", "hidden": 128,
                                 "lr": 0.01, "eval_every": 5, "dropout": 0.0, "weight_decay": 0.0}


# Flags that are gone, with what replaces them: refused in one line (argparse would only say "unrecognized").
REMOVED_FLAGS: dict[str, str] = {
    "classic": "--classic is gone: the model no longer depends on the mode that trains (docs/reproducibility.md). "
               "HINT: --norm layer --residual --linear-head builds the classic baselines' model in every mode",
}


@dataclass(kw_only=True)
class TrainConfig:
    dataset: str = "synthetic"
    """`synthetic[:key=value,...]`, `npz:PATH`, `npy:FOLDER`, or a public graph by name: Cora, Amazon-Photo,
    Coauthor-CS, WikiCS, Reddit, ogbn-arxiv, ... (all in docs/datasets.md)."""
    root: str = "data"
    """Folder for downloaded datasets, preprocessed caches and automatic partitions."""
    splits: str = ""
    """An npz of int node ids `train`, `valid`, `test`: fixed splits in place of the dataset's own (any dataset;
    checked; part of what a prepared partition is matched by). Empty: the dataset's."""
    local_prep: bool = False
    """Prepare the dataset on rank 0 of every host (node-local disks) instead of global rank 0."""
    epochs: int = 0
    """Passes over the training nodes; 0: until validation stops improving, within a step budget
    (docs/training.md)."""
    batch_size: int = 1024
    """Training seeds per optimizer step: over all ranks with --batch-scope global (split among them, so any
    rank count takes the same steps), per rank with --batch-scope rank."""
    eval_batch_size: int = 0
    """Nodes per rank in an evaluation step (forward only, so larger than training's); 0: four times --batch-size
    (eight for --task link, a pair and its negatives counting each)."""
    max_steps: int = 0
    """Training steps per epoch at most (0: all). Each epoch then trains on that many batches of a fresh
    shuffle, as Lightning's limit_train_batches does: for quick checks and benchmarks on big edge sets."""
    batch_scope: str = "global"
    """global: --batch-size is the global batch, so training means the same on any rank count (and it reached
    the target accuracy sooner than rank: docs/training.md); rank: --batch-size seeds per rank."""
    lr_scaling: str = "none"
    """none, linear or sqrt: multiply --lr by (global batch / --batch-size), or its square root, when the
    global batch grows (only with --batch-scope rank on several ranks), reached by a linear warm-up."""
    warmup_epochs: float = 1.0
    """Epochs over which a scaled learning rate ramps up from --lr (with --lr-scaling linear or sqrt)."""
    fanout: str = "15,10,5"
    """Neighbours sampled per layer, outermost last; -1 takes all (leading -1: write --fanout=-1,-1, or
    argparse reads the value as a flag). Its length is the number of layers."""
    edge_fanout: str = ""
    """Heterogeneous graphs: fanouts of some edge types in place of --fanout, as TYPE=F1,F2,... per edge type
    (TYPE is src__relation__dst, e.g. actor__to__movie=5,5), several separated by ';'."""
    hidden: int = 256
    """Width of each hidden layer."""
    lr: float = 0.003
    """Learning rate of Adam (multiplied as --lr-scaling says, where it applies)."""
    dropout: float = 0.7
    """Dropout after each hidden layer (0: off); the same in every --minibatch mode (docs/training.md
    "Defaults and why")."""
    weight_decay: float = 5e-4
    """L2 penalty of Adam: the real graphs overfit without it (measured: docs/training.md "Defaults and why")."""
    model: str = "sage"
    """sage (GraphSAGE), gcn or gat; on a heterogeneous graph sage (a SAGE conv per edge type, summed per
    node type) or rgcn."""
    norm: str = "none"
    """After each hidden layer (and its residual), before the ReLU: none, layer (LayerNorm per node) or batch
    (BatchNorm, its statistics over every rank's rows of the layer; docs/training.md)."""
    residual: bool = False
    """Add each layer's input to its output: itself where the widths agree, else a linear projection (sage,
    gcn, gat on homogeneous graphs)."""
    linear_head: bool = False
    """Every conv --hidden wide (each with its norm, ReLU and dropout), then one linear layer to the classes or
    embeddings, as classic GNN baselines (sage, gcn, gat on homogeneous graphs)."""
    task: str = "node"
    """node (classify the labelled nodes) or link (predict held-out edges; AUC, MRR, Hits@K). A link run has
    its own defaults for flags not given (LINK_DEFAULTS here; docs/training.md "Defaults and why")."""
    decoder: str = "dot"
    """--task link: score a pair by the dot product of its embeddings (dot) or an MLP over their product."""
    negatives: str = "uniform"
    """--task link: training negatives per positive, fresh each step: uniform pairs, or tail (the positive's
    source with a uniform target)."""
    link_val: float = 0.05
    """--task link: share of undirected edges held out for validation."""
    link_test: float = 0.1
    """--task link: share held out for test."""
    link_tails: int = 100
    """--task link: fixed negative targets per held-out edge, against which MRR and Hits@K rank it."""
    hits_k: int = 10
    """--task link: K of the reported Hits@K."""
    feature_norm: str = "none"
    """row: scale each node's features to sum 1, by their owner (PyG's NormalizeFeatures; raw bag-of-words
    counts lose link AUC on Cora: docs/tasks.md); none: as stored."""
    feature_dtype: str = "fp32"
    """fp32, fp16 or bf16: how each rank holds its feature rows, its cache and the rows it exchanges (half
    the memory and the bytes; each batch is widened to float32 on the device). The partition stays fp32."""
    seed: int = 0
    """Random seed: initial weights, batch order and sampling, dropout, held-out links, automatic partition."""
    partitions: str = ""
    """A partition folder from `python -m mpignn.partition`; empty: partition on rank 0 under --root."""
    force: bool = False
    """Let partition delivery replace what sits at the partition path on a host even when it is not an mpignn
    partition folder (refused otherwise, so nothing mpignn did not write is deleted)."""
    partition_method: str = PARTITION_DEFAULT
    """metis (the default: always installed, the same parts for a seed on every machine), kaminpar (pip install
    kaminpar; faster on graphs of millions of nodes), random, or auto (kaminpar if installed)."""
    replicated: bool = False
    """Keep the whole graph on every rank and split the training nodes (small graphs)."""
    cache_size: int | str = "auto"
    """Remote nodes whose feature rows each rank caches, most-fetched first. auto: a quarter of the host's
    available memory over its ranks (docs/launchers-and-devices.md); N: at most N rows; 0: none."""
    device: str = "auto"
    """auto, cpu, cuda or xpu; auto: a GPU or XPU per node-local rank where torch sees one, else the CPU."""
    backend: str = "auto"
    """torch.distributed backend for DDP: auto, gloo, mpi, nccl, xccl, ccl."""
    exchange: str = "auto"
    """How remote features travel: auto or mpi (mpi4py on host buffers, the fastest here), or torch
    (torch.distributed all_to_all on the DDP backend: NCCL/xccl device tensors, gloo on CPU)."""
    prefetch: str = "auto"
    """Produce batch k+1 (sample, exchange, copy) in a thread while batch k computes: auto (with one part, or
    on a GPU/XPU or with >= 4 threads per rank, where a core is free), on, or off."""
    threads: int = 0
    """Threads per rank; 0: the host's cores divided by its ranks."""
    precision: str = "auto"
    """fp32, bf16 (autocast: faster on CPUs with bf16 matrix units, much slower without them (the run warns);
    its peak grows over the first epochs: docs/failures.md), or auto (= fp32)."""
    embed_dim: int = 0
    """Learnable numbers per node, appended to its features (for nodes without useful features); owners keep
    and update their rows by sparse Adagrad (mpignn.exchange.embedding). 0: none."""
    embed_lr: float = 0.1
    """Learning rate of the embeddings' sparse Adagrad."""
    eval_every: int = 1
    """Evaluate val/test every N epochs (and always after the last)."""
    minibatch: str = "auto"
    """independent, cooperative (each row once, by its owner) or full (the whole graph a step); auto: full
    where a full step counts little enough work, else independent; tune: timed (docs/training.md)."""
    sampler: str = "neighbor"
    """neighbor: each target draws its own --fanout neighbours; labor: layer-neighbour sampling, targets sharing a
    neighbour agree on it, so fewer rows a step (docs/training.md)."""
    batch_dependency: int = 1
    """--sampler labor: K consecutive training steps share their variates, each rotating them by 1/K, so their
    sampled sets overlap and rows the last batch brought are not fetched again (docs/training.md)."""
    layer_dependency: bool = False
    """--sampler labor: every hop of a batch draws the same variate for a node (DGL's layer_dependency), so a
    node kept at one hop tends to be kept at the next: fewer rows a step (docs/training.md)."""
    labor_iterations: int = 0
    """--sampler labor: LABOR-i's importance-sampling iterations, which concentrate a hop on fewer sources
    (each edge weighted; --model sage or gcn); 0: LABOR-0 (docs/training.md)."""
    sample_on: str = "auto"
    """Where hops are drawn: host (numba kernels) or device (torch ops on the compute device; the same draws).
    auto: host, until the device's step is measured (docs/launchers-and-devices.md)."""
    feature_device: str = "auto"
    """Where feature rows live: host (pinned copies each step) or device (gathered there). auto: device for one
    part where they fit in free device memory (docs/launchers-and-devices.md)."""
    eval: str = "sampled"
    """sampled: val/test scores on sampled neighbourhoods (--fanout); exact: those of exact inference (whole
    neighbourhoods, as python -m mpignn.predict) in their place (docs/predict.md)."""
    evals_per_epoch: int = 1
    """Evaluate val/test K times per epoch, after each K-th of its steps (time to accuracy then resolves to
    a fraction of an epoch); more than 1 needs --eval-every 1."""
    patience: int = 0
    """Stop once validation has not improved for this many evaluations; report the test score at the best,
    keep its weights in best/ (0: with --epochs never, else the converge rule's)."""
    target_val: float = 0.0
    """Stop once the validation accuracy (AUC for --task link) reaches this (0: never; time-to-accuracy runs).
    Sampled evaluation then scores test only where validation reaches it, and after the last epoch."""
    target_test: float = 0.0
    """Stop once the test accuracy (AUC for --task link) reaches this (0: never): for measuring the time to a
    published test score, never for choosing a model (bench --target-split test)."""
    metrics_out: str = ""
    """Append one JSON line per epoch to this file."""
    tensorboard: str = ""
    """Write each epoch record's numbers as TensorBoard scalars into this folder, from rank 0 (step: the
    evaluations so far, epoch + 1 with one per epoch). Needs pip install mpignn[tensorboard]."""
    checkpoint_dir: str = ""
    """Save model, optimizer, every rank's RNG state and learnable rows and the config after each epoch (and on
    SIGUSR2) here, as one generation (gen-*: fsync'd files, a manifest written last)."""
    resume: bool = False
    """Continue from the checkpoint in --checkpoint-dir (after the last epoch, or at the step where SIGUSR2
    stopped the run)."""
    force_new: bool = False
    """Start over in a --checkpoint-dir holding another run's checkpoint (removing its generations and best/);
    without it, or --resume, such a folder is refused."""
    keep_checkpoints: int = 2
    """Checkpoints (generations, gen-* in --checkpoint-dir) to keep; an older one is removed only once a newer
    one is complete, so a crash while saving leaves the one before."""
    requeue: bool = False
    """On SIGUSR2 (Slurm's --signal=USR2@T), after the checkpoint, run `scontrol requeue $SLURM_JOB_ID`; the
    requeued job then resumes from --checkpoint-dir (needed) by itself."""
    prep_timeout: float = 3600.0
    """Seconds the other ranks wait for rank 0 to prepare the dataset before giving up."""
    collective_timeout: float = 300.0
    """Seconds any collective of training may wait; past it the job ends, naming the ranks that stopped
    answering, instead of hanging until the wall-clock limit. Also torch.distributed's timeout."""

    def __post_init__(self) -> None:
        specs = fields(self)  # types first (a TOML `hidden = 64.5` or `resume = "false"`), then ranges
        for name, value in check_types(self.to_dict(), {f.name: f.type for f in specs},
                                       {f.name: f.default for f in specs}).items():
            setattr(self, name, value)  # an int given for a float field (TOML `lr = 1`) becomes a float
        self.fanouts = parse_fanout(self.fanout)
        self.edge_fanouts = parse_edge_fanout(self.edge_fanout, len(self.fanouts))
        check_ranges(self.to_dict(), {f.name: f.default for f in specs})  # each value alone (config.values)
        self.cache_size = parse_cache_size(self.cache_size)
        choices = {"precision": PRECISIONS, "exchange": EXCHANGES, "prefetch": PREFETCH_MODES, "eval": EVALS,
                   "batch_scope": BATCH_SCOPES, "lr_scaling": LR_SCALINGS, "task": tuple(TASKS), "decoder": DECODERS,
                   "negatives": NEGATIVES, "minibatch": MINIBATCHES, "feature_norm": FEATURE_NORMS, "feature_dtype": FEATURE_DTYPES,
                   "partition_method": (*PARTITION_METHODS, DEFAULT_METHOD), "model": MODELS,
                   "norm": NORMS, "sampler": SAMPLERS,
                   "sample_on": SAMPLE_ON, "feature_device": FEATURE_DEVICES}
        for name, allowed in choices.items():
            check_choice(name, getattr(self, name), allowed)
        check_combinations(self.to_dict())  # every refused pair of flags, shared with the API (config.refusals)

    @property
    def num_layers(self) -> int:
        return len(self.fanouts)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> "TrainConfig":
        values: dict[str, Any] = {}
        if getattr(ns, "config", None):
            try:
                with open(ns.config, "rb") as f:
                    values.update(tomllib.load(f))
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"cannot read --config {ns.config}: {exc}. HINT: a TOML file of key = value")
        values.update({k: v for k, v in vars(ns).items() if k != "config"})
        removed = sorted(set(values) & set(REMOVED_FLAGS))
        if removed:
            raise ConfigError(REMOVED_FLAGS[removed[0]])
        if values.get("eval") == "full":
            raise ConfigError("--eval full is gone: its exact scores are --eval exact's, which takes them as the "
                              "run's val/test scores. HINT: --eval exact")
        if values.get("task") == "link":  # measured link defaults, for each flag neither the file nor argv gave
            values = {**LINK_DEFAULTS, **values}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown config key(s) {', '.join(unknown)}. HINT: keys are the flag names with _")
        return cls(**values)


def field_docs(cls: type | None = None) -> dict[str, str]:
    """The docstrings written under each field of the dataclass `cls` (default TrainConfig; read from the
    source, as torchtitan does): the flags' help."""
    import ast
    import inspect

    docs: dict[str, str] = {}
    tree = ast.parse(inspect.getsource(cls or TrainConfig))
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())  # type: ignore[attr-defined]
    return docs


def build_parser() -> argparse.ArgumentParser:
    """Flags for every TrainConfig field; defaults stay in the dataclass (argparse gets SUPPRESS)."""
    parser = argparse.ArgumentParser(prog="python -m mpignn.train",
                                     description="Distributed GNN training: mpirun -np N python -m mpignn.train")
    parser.add_argument("--config", help="TOML file of defaults (flags win)")
    for name in REMOVED_FLAGS:  # accepted by the parser, refused by `from_args` with the replacement
        parser.add_argument("--" + name.replace("_", "-"), default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return add_fields(parser, TrainConfig)


def add_fields(parser: argparse.ArgumentParser, cls: type) -> argparse.ArgumentParser:
    """A flag for each field of the dataclass `cls` (`--field-name`; a bool is a switch), its docstring the
    help; defaults stay in the dataclass (argparse gets SUPPRESS) and a field without one is required. The one
    builder of the parsers of train, predict and partition."""
    docs = field_docs(cls)
    for f in fields(cls):
        flag, required = "--" + f.name.replace("_", "-"), f.default is dataclasses.MISSING
        text = (docs.get(f.name, "") + ("" if required else f" (default: {f.default!r})")).strip()
        if f.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", default=argparse.SUPPRESS, help=text)
        else:
            kind = {"int": int, "float": float}.get(str(f.type), str)
            parser.add_argument(flag, type=kind, required=required, default=argparse.SUPPRESS, help=text)
    return parser


def parse(argv: Sequence[str] | None = None) -> TrainConfig:
    return TrainConfig.from_args(build_parser().parse_args(argv))


def check_fits(cfg: TrainConfig, *, world_size: int | None = None, ranks_on_host: int | None = None,
               available: int | None = None) -> int:
    """Refuse a model and training step that cannot fit in memory, before anything is loaded (not collective).

    The estimate is `config.values.estimate_step_bytes` (a lower bound from --hidden, the layers, the seeds of
    one step on one rank and --model/--task/--decoder) times the ranks sharing the host's memory.

    Args:
        world_size, ranks_on_host: the job's ranks and those on this host (default: what the launcher's
            variables say, `env.detect()`; pass the communicator's once MPI is up).
        available: bytes free (default `env.mem_available_bytes()`: the host's, or its cgroup's; unknown:
            nothing refused).
    Returns:
        The estimate in bytes.
    Raises:
        ConfigError: the estimate exceeds `available`. It depends on the host, so it is not agreed: raise it
            where `mpi.run_main` can abort the job (MPI up).
    """
    from mpignn import env

    if world_size is None or ranks_on_host is None:
        info = env.detect()
        world_size = info.world_size if world_size is None else world_size
        ranks_on_host = info.local_size if ranks_on_host is None else ranks_on_host
    world_size, ranks_on_host = max(1, world_size), max(1, ranks_on_host)
    seeds = -(-cfg.batch_size // world_size) if cfg.batch_scope == "global" else cfg.batch_size
    per_rank = estimate_step_bytes(cfg.hidden, cfg.num_layers, seeds, model=cfg.model, task=cfg.task,
                                   decoder=cfg.decoder)
    estimate = per_rank * ranks_on_host
    check_memory(estimate, env.mem_available_bytes() if available is None else available,
                 f"--hidden {cfg.hidden}, {cfg.num_layers} layers, --model {cfg.model}, {seeds} seeds per step, "
                 f"{ranks_on_host} rank(s) on this host")
    return estimate
