"""Training configuration: one frozen dataclass, its parser, and the memory check. Stdlib only.
Every default lives in the dataclass; precedence is defaults < `--config file.toml` < flags.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import math
import sys
from dataclasses import dataclass, fields
from typing import Any

from mpignn.config.choices import (BATCH_SCOPES, DECODERS, EVALS, LR_SCALINGS, MINIBATCHES, MODELS, NEGATIVES, NORMS,
                                   PRECISIONS, PREFETCH_MODES, TASKS)
from mpignn.config.graph_options import GraphOptions
from mpignn import env
from mpignn.config.values import check_memory, estimate_step_bytes, opt
from mpignn.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (the default of many clusters' images): tomllib's origin, installed by setup.py there
    import tomli as tomllib

__all__ = ["LINK_DEFAULTS", "REMOVED_FLAGS", "TrainConfig", "add_fields", "build_parser", "check_fits", "field_docs"]


# --task link's own defaults where no flag or --config key sets them (their figures: docs/training.md "Defaults
# and why"). Dropout and weight decay stay off there: the link numbers were measured without them.
LINK_DEFAULTS: dict[str, Any] = {"feature_norm": "row", "epochs": 100, "fanout": "10,10", "hidden": 128,
                                 "lr": 0.01, "eval_every": 5, "dropout": 0.0, "weight_decay": 0.0}


# Flags that are gone, with what replaces them: refused in one line (argparse would only say "unrecognized").
REMOVED_FLAGS: dict[str, str] = {
    "classic": "--classic is gone: the model no longer depends on the mode that trains (docs/reproducibility.md). "
               "HINT: --norm layer --residual --linear-head builds the classic baselines' model in every mode",
}


@dataclass(frozen=True, kw_only=True)
class TrainConfig(GraphOptions):
    """Every flag of `python -m mpignn.train`: the graph's section (`GraphOptions`) and the run's own. Frozen
    once made; what a run resolves from `auto` is a separate record (`runtime.session`)."""

    epochs: int = opt(0, accepts=lambda v: v >= 0, problem="must be >= 0",
                      hint="e.g. --epochs 20, or leave it out (0) to train until validation stops improving")
    """Passes over the training nodes; 0: until validation stops improving, within a step budget
    (docs/training.md)."""
    batch_size: int = opt(1024, accepts=lambda v: v >= 1, problem="must be a positive int")
    """Training seeds per optimizer step: over all ranks with --batch-scope global (split among them, so any
    rank count takes the same steps), per rank with --batch-scope rank."""
    eval_batch_size: int = opt(0, accepts=lambda v: v >= 0, problem="must be >= 0",
                               hint="e.g. --eval-batch-size 4096, or 0 for the default")
    """Nodes per rank in an evaluation step (forward only, so larger than training's); 0: four times --batch-size
    (eight for --task link, a pair and its negatives counting each)."""
    max_steps: int = opt(0, accepts=lambda v: v >= 0, problem="must be >= 0", hint="0 means every batch")
    """Training steps per epoch at most (0: all). Each epoch then trains on that many batches of a fresh
    shuffle, as Lightning's limit_train_batches does: for quick checks and benchmarks on big edge sets."""
    batch_scope: str = opt("global", choices=BATCH_SCOPES)
    """global: --batch-size is the global batch, so training means the same on any rank count (and it reached
    the target accuracy sooner than rank: docs/training.md); rank: --batch-size seeds per rank."""
    lr_scaling: str = opt("none", choices=LR_SCALINGS)
    """none, linear or sqrt: multiply --lr by (global batch / --batch-size), or its square root, when the
    global batch grows (only with --batch-scope rank on several ranks), reached by a linear warm-up."""
    warmup_epochs: float = opt(1.0, accepts=lambda v: math.isfinite(v) and v >= 0,
                               problem="must be a finite number >= 0")
    """Epochs over which a scaled learning rate ramps up from --lr (with --lr-scaling linear or sqrt)."""
    hidden: int = opt(256, accepts=lambda v: v >= 1, problem="must be a positive int")
    """Width of each hidden layer."""
    lr: float = opt(0.003, accepts=lambda v: math.isfinite(v) and v > 0, problem="must be a finite positive number")
    """Learning rate of Adam (multiplied as --lr-scaling says, where it applies)."""
    dropout: float = opt(0.7, accepts=lambda v: 0 <= v < 1, problem="must be a probability in [0, 1)",
                        hint="e.g. --dropout 0.5, or 0 for none")
    """Dropout after each hidden layer (0: off); the same in every --minibatch mode (docs/training.md
    "Defaults and why")."""
    weight_decay: float = opt(5e-4, accepts=lambda v: math.isfinite(v) and v >= 0,
                              problem="must be a finite number >= 0", hint="e.g. --weight-decay 0.0005, or 0 for none")
    """L2 penalty of Adam: the real graphs overfit without it (measured: docs/training.md "Defaults and why")."""
    model: str = opt("sage", choices=MODELS)
    """sage (GraphSAGE), gcn or gat; on a heterogeneous graph sage (a SAGE conv per edge type, summed per
    node type) or rgcn."""
    norm: str = opt("none", choices=NORMS)
    """After each hidden layer (and its residual), before the ReLU: none, layer (LayerNorm per node) or batch
    (BatchNorm, its statistics over every rank's rows of the layer; docs/training.md)."""
    residual: bool = False
    """Add each layer's input to its output: itself where the widths agree, else a linear projection (sage,
    gcn, gat on homogeneous graphs)."""
    linear_head: bool = False
    """Every conv --hidden wide (each with its norm, ReLU and dropout), then one linear layer to the classes or
    embeddings, as classic GNN baselines (sage, gcn, gat on homogeneous graphs)."""
    task: str = opt("node", choices=TASKS)
    """node (classify the labelled nodes) or link (predict held-out edges; AUC, MRR, Hits@K). A link run has
    its own defaults for flags not given (LINK_DEFAULTS here; docs/training.md "Defaults and why")."""
    decoder: str = opt("dot", choices=DECODERS)
    """--task link: score a pair by the dot product of its embeddings (dot) or an MLP over their product."""
    negatives: str = opt("uniform", choices=NEGATIVES)
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
    device: str = "auto"
    """auto, cpu, cuda or xpu; auto: a GPU or XPU per node-local rank where torch sees one, else the CPU."""
    backend: str = "auto"
    """torch.distributed backend for DDP: auto, gloo, mpi, nccl, xccl, ccl."""
    prefetch: str = opt("auto", choices=PREFETCH_MODES)
    """Produce batch k+1 (sample, exchange, copy) in a thread while batch k computes: auto (with one part, or
    on a GPU/XPU or with >= 4 threads per rank, where a core is free), on, or off."""
    threads: int = opt(0, accepts=lambda v: v >= 0, problem="must be >= 0", hint="0 means automatic")
    """Threads per rank; 0: the host's cores divided by its ranks."""
    precision: str = opt("auto", choices=PRECISIONS)
    """fp32, bf16 (autocast: faster on CPUs with bf16 matrix units, much slower without them (the run warns);
    its peak grows over the first epochs: docs/failures.md), or auto (= fp32)."""
    embed_dim: int = 0
    """Learnable numbers per node, appended to its features (for nodes without useful features); owners keep
    and update their rows by sparse Adagrad (mpignn.exchange.embedding). 0: none."""
    embed_lr: float = 0.1
    """Learning rate of the embeddings' sparse Adagrad."""
    eval_every: int = opt(1, accepts=lambda v: v >= 1, problem="must be a positive int")
    """Evaluate val/test every N epochs (and always after the last)."""
    minibatch: str = opt("auto", choices=MINIBATCHES)
    """independent, cooperative (each row once, by its owner) or full (the whole graph a step); auto: full
    where a full step counts little enough work, else independent; tune: timed (docs/training.md)."""
    eval: str = opt("sampled", choices=EVALS)
    """sampled: val/test scores on sampled neighbourhoods (--fanout); exact: those of exact inference (whole
    neighbourhoods, as python -m mpignn.predict) in their place (docs/predict.md)."""
    evals_per_epoch: int = opt(1, accepts=lambda v: v >= 1, problem="must be a positive int")
    """Evaluate val/test K times per epoch, after each K-th of its steps (time to accuracy then resolves to
    a fraction of an epoch); more than 1 needs --eval-every 1."""
    patience: int = opt(0, accepts=lambda v: v >= 0, problem="expected evaluations >= 0",
                        hint="e.g. --patience 5, or 0: never stop early with --epochs (without it: the converge rule's)")
    """Stop once validation has not improved for this many evaluations; report the test score at the best,
    keep its weights in best/ (0: with --epochs never, else the converge rule's)."""
    target_val: float = opt(0.0, accepts=lambda v: 0 <= v <= 1, problem="must be a score in [0, 1] (0: none)",
                            hint="e.g. --target-val 0.97")
    """Stop once the validation accuracy (AUC for --task link) reaches this (0: never; time-to-accuracy runs).
    Sampled evaluation then scores test only where validation reaches it, and after the last epoch."""
    target_test: float = opt(0.0, accepts=lambda v: 0 <= v <= 1, problem="must be a score in [0, 1] (0: none)",
                             hint="e.g. --target-test 0.96")
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
    keep_checkpoints: int = opt(2, accepts=lambda v: v >= 1, problem="expected at least 1",
                                hint="--keep-checkpoints 2 (the default)")
    """Checkpoints (generations, gen-* in --checkpoint-dir) to keep; an older one is removed only once a newer
    one is complete, so a crash while saving leaves the one before."""
    requeue: bool = False
    """On SIGUSR2 (Slurm's --signal=USR2@T), after the checkpoint, run `scontrol requeue $SLURM_JOB_ID`; the
    requeued job then resumes from --checkpoint-dir (needed) by itself."""
    collective_timeout: float = opt(300.0, accepts=lambda v: 0 < v < math.inf, problem="must be positive seconds")
    """Seconds any collective of training may wait; past it the job ends, naming the ranks that stopped
    answering, instead of hanging until the wall-clock limit. Also torch.distributed's timeout."""

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> "TrainConfig":
        values: dict[str, Any] = {}
        if getattr(ns, "config", None):
            try:
                with open(ns.config, "rb") as f:
                    values.update(tomllib.load(f))
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:  # TOML is UTF-8 only
                raise ConfigError(f"cannot read --config {ns.config}: {exc}. HINT: a TOML file of key = value, "
                                  "saved as UTF-8")
        values.update({k: v for k, v in vars(ns).items() if k != "config"})
        removed = sorted(set(values) & set(REMOVED_FLAGS))
        if removed:
            raise ConfigError(REMOVED_FLAGS[removed[0]])
        if values.get("eval") == "full":
            raise ConfigError("--eval full is gone: its exact scores are --eval exact's, which takes them as the "
                              "run's val/test scores. HINT: --eval exact")
        if values.get("task") == "link":  # measured link defaults, for each flag neither the file nor argv gave
            values = {**LINK_DEFAULTS, **values}
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown config key(s) {', '.join(unknown)}. HINT: keys are the flag names with _")
        return cls(**values)


def field_docs(cls: type | None = None) -> dict[str, str]:
    """Return the docstrings under each field of `cls` (default TrainConfig), read from the source as
    torchtitan does: the flags' help."""
    docs: dict[str, str] = {}
    for klass in reversed((cls or TrainConfig).__mro__):  # a section's fields (GraphOptions) are documented there
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(inspect.getsource(klass)).body[0].body  # type: ignore[attr-defined]
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
    """Add a flag per field of `cls`, its docstring the help; the one builder of train's, predict's and
    partition's parsers. Defaults stay in the dataclass (argparse gets SUPPRESS)."""
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


def check_fits(cfg: TrainConfig, *, world_size: int | None = None, ranks_on_host: int | None = None,
               available: int | None = None) -> int:
    """Refuse a model and step that cannot fit in memory, before anything loads; return the estimate in bytes
    (`estimate_step_bytes` times the ranks on this host). Not collective. `world_size` and `ranks_on_host`
    default to `env.detect()`'s (pass the communicator's once MPI is up), `available` to the bytes free.
    The ConfigError is host-dependent, so not agreed: raise it where `mpi.run_main` can abort the job.
    """
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
