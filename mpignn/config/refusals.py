"""Every refused combination of flags, written once, so the CLI and the Python API refuse alike, in the same
words. A caller skips the rules needing values it does not know (the API knows no `--resume`). Stdlib only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from mpignn.errors import ConfigError

__all__ = ["Rule", "RULES", "refusal", "check_combinations"]


@dataclass(frozen=True)
class Rule:
    """Values `names` refused together: `refuses(*values)` says whether, `message(*values)` why and the fix."""

    names: tuple[str, ...]
    refuses: Callable[..., bool]
    text: str | Callable[..., str]  # formatted with the values by name, or called with them

    def message(self, *values: Any) -> str:
        return self.text(*values) if callable(self.text) else self.text.format(**dict(zip(self.names, values)))


def _owner_flags(replicated: bool, embed_dim: int) -> str:
    return " and ".join(flag for flag, on in (("--replicated", replicated), ("--embed-dim", embed_dim)) if on)


def _model_options(norm: str, residual: bool, linear_head: bool) -> str:
    return " and ".join(flag for flag, on in ((f"--norm {norm}", norm != "none"), ("--residual", residual),
                                              ("--linear-head", linear_head)) if on)


_OWNER_MODES = ("cooperative", "full")  # each row computed by its owner, its halo crossing layer by layer

RULES: tuple[Rule, ...] = (
    Rule(("model", "norm", "residual", "linear_head"),  # R-GCN is HeteroGNN's: none of these layers
         lambda model, *opts: model == "rgcn" and bool(_model_options(*opts)),
         lambda model, *opts: f"--model {model} has no norm, residual or head layers; got {_model_options(*opts)}. "
                              f"HINT: drop {_model_options(*opts)}, or --model sage, gcn or gat on a homogeneous "
                              "graph"),
    Rule(("hetero", "norm", "residual", "linear_head"),
         lambda hetero, *opts: bool(hetero) and bool(_model_options(*opts)),
         lambda hetero, *opts: f"{_model_options(*opts)} applies to the models of homogeneous graphs (sage, gcn, "
                               f"gat); this graph has node and edge types. HINT: drop {_model_options(*opts)}"),
    Rule(("minibatch", "replicated", "embed_dim"),
         lambda mode, replicated, embed_dim: mode in _OWNER_MODES and bool(replicated or embed_dim),
         lambda mode, replicated, embed_dim: f"--minibatch {mode} computes each row on its owner; "
                                             f"{_owner_flags(replicated, embed_dim)} cannot. HINT: --minibatch "
                                             "independent"),
    Rule(("minibatch", "task", "cooperative_task"), lambda mode, task, able: mode in _OWNER_MODES and not able,
         "--minibatch {minibatch} trains node classification; --task {task} batches are not node seeds. "
         "HINT: --minibatch independent"),
    Rule(("minibatch", "hetero"), lambda mode, hetero: mode in _OWNER_MODES and bool(hetero),
         "--minibatch {minibatch} samples homogeneous graphs; this one has node and edge types. "
         "HINT: --minibatch independent"),
    Rule(("sampler", "hetero"), lambda sampler, hetero: sampler == "labor" and bool(hetero),
         "--sampler labor samples homogeneous graphs; this one has node and edge types. HINT: --sampler neighbor"),
    Rule(("batch_dependency", "sampler"), lambda k, sampler: k > 1 and sampler != "labor",
         "--batch-dependency {batch_dependency} makes batches share layer-neighbour variates; --sampler {sampler} "
         "draws none. HINT: --sampler labor, or drop --batch-dependency"),
    Rule(("layer_dependency", "sampler"), lambda same, sampler: bool(same) and sampler != "labor",
         "--layer-dependency shares layer-neighbour variates between hops; --sampler {sampler} draws none. "
         "HINT: --sampler labor, or drop --layer-dependency"),
    Rule(("labor_iterations", "sampler"), lambda iterations, sampler: iterations > 0 and sampler != "labor",
         "--labor-iterations {labor_iterations} weights layer-neighbour sampling; --sampler {sampler} draws no "
         "variates. HINT: --sampler labor, or drop --labor-iterations"),
    Rule(("labor_iterations", "model"), lambda iterations, model: iterations > 0 and model == "gat",
         "--labor-iterations {labor_iterations} weights each sampled edge, and --model {model}'s attention takes no "
         "edge weights. HINT: --model sage or gcn, or drop --labor-iterations (LABOR-0 needs no weights)"),
    Rule(("feature_device", "exchange"),  # --exchange torch moves rows device to device
         lambda where, exchange: where == "host" and exchange == "torch",
         "--feature-device host keeps the feature rows on the host; --exchange torch moves them device to device. "
         "HINT: --exchange auto"),
    Rule(("embed_dim", "replicated"), lambda embed_dim, replicated: bool(embed_dim and replicated),
         "--embed-dim keeps each node's row on its owner, and --replicated has no owners. HINT: drop --replicated "
         "(partitioned training) or --embed-dim"),
    Rule(("splits", "task"), lambda splits, task: bool(splits) and task == "link",
         "--splits sets which nodes are classified in training, validation and test; --task {task} holds out edges "
         "instead. HINT: drop --splits (--link-val and --link-test set the held-out edges)"),
    Rule(("partitions", "replicated"), lambda partitions, replicated: bool(partitions and replicated),
         "--partitions and --replicated exclude each other. HINT: drop one"),
    Rule(("evals_per_epoch", "eval_every"), lambda per_epoch, every: per_epoch > 1 and every != 1,
         "--evals-per-epoch {evals_per_epoch} evaluates inside every epoch, so it needs --eval-every 1; got "
         "--eval-every {eval_every}. HINT: drop one of them"),
    Rule(("resume", "checkpoint_dir"), lambda resume, folder: bool(resume and not folder),
         "--resume needs --checkpoint-dir. HINT: pass the folder of the earlier run"),
    Rule(("resume", "force_new"), lambda resume, force_new: bool(resume and force_new),
         "--resume continues the run in --checkpoint-dir and --force-new starts over there; got both. HINT: drop one"),
    Rule(("requeue", "checkpoint_dir"), lambda requeue, folder: bool(requeue and not folder),
         "--requeue expects --checkpoint-dir (the requeued job resumes from it); got none. "
         "HINT: add --checkpoint-dir DIR"),
    Rule(("device", "backend"),  # their process groups take no XPU tensors
         lambda device, backend: device == "xpu" and backend in ("gloo", "mpi"),
         "expected --backend xccl, ccl or auto with --device xpu; got --backend {backend}, which takes CPU (and "
         "CUDA) tensors only. HINT: --backend auto, or --device cpu"),
)

def refusal(values: Mapping[str, Any]) -> str:
    """Return the first refused combination among `values` as a one-line error with its HINT, or ""."""
    for rule in RULES:
        if all(name in values for name in rule.names):
            args = [values[name] for name in rule.names]
            if rule.refuses(*args):
                return rule.message(*args)
    return ""


def check_combinations(values: Mapping[str, Any]) -> None:
    """Raise ConfigError with `refusal(values)` where it is not empty. Not collective: every rank raises alike."""
    problem = refusal(values)
    if problem:
        raise ConfigError(problem)
