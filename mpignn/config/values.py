"""Each config value alone: its type (against the field's annotation) and its range, and a lower bound of the
memory the model and one training step take. Stdlib only: imports nothing but mpignn.errors.

`TrainConfig.__post_init__` runs `check_types` first, then `check_ranges`, so a wrong TOML type or an
impossible number fails in one line before anything is loaded (combinations of flags: `config.refusals`).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from mpignn.errors import ConfigError

__all__ = ["RANGES", "check_types", "check_ranges", "estimate_step_bytes", "check_memory"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# annotation -> (accepts, what the message says was expected, the HINT's example from (flag, key, default))
_TYPES: dict[str, tuple[Callable[[Any], bool], str, Callable[[str, str, Any], str]]] = {
    "int": (_is_int, "an int",
            lambda flag, key, d: f"{flag} {d}, or in TOML {key} = {d} (a whole number: no quotes, no decimal point)"),
    "float": (lambda v: _is_int(v) or isinstance(v, float), "a number",
              lambda flag, key, d: f"{flag} {d}, or in TOML {key} = {d} (no quotes)"),
    "str": (lambda v: isinstance(v, str), "a string",
            lambda flag, key, d: f'in TOML {key} = "{d}" (text in quotes, as {flag} takes it)'),
    "bool": (lambda v: isinstance(v, bool), "a TOML boolean (true or false)",
             lambda flag, key, d: f"in TOML {key} = true or {key} = false (no quotes); on the command line {flag} "
                                  "turns it on"),
    "int | str": (lambda v: _is_int(v) or isinstance(v, str), "an int or a string",
                  lambda flag, key, d: f'{flag} {d}, or in TOML {key} = "{d}" or a row count such as 50000'),
}


def check_types(values: Mapping[str, Any], annotations: Mapping[str, Any],
                defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Check each of `values` against its field's annotation (a string such as "int", "float", "bool",
    "int | str", or the type itself): bools only where the annotation is bool (a TOML "false" is a string, not
    false), floats accept ints. Names without a known annotation are left to their own checks.

    Returns:
        {name: value} of the values to replace: the ints given for float fields, as floats.
    Raises:
        ConfigError: naming the key and its flag, the expected type and the value (with its type), and a HINT.
    """
    widened: dict[str, Any] = {}
    for name, value in values.items():
        note = annotations.get(name)
        kind = note if isinstance(note, str) else getattr(note, "__name__", str(note))
        if kind not in _TYPES:
            continue
        accepts, what, hint = _TYPES[kind]
        if not accepts(value):
            flag = "--" + name.replace("_", "-")
            example = (defaults or {}).get(name, "...")
            raise ConfigError(f"config key {name} ({flag}) expected {what}; got {value!r} ({type(value).__name__}). "
                              f"HINT: {hint(flag, name, example)}")
        if kind == "float" and _is_int(value):
            widened[name] = float(value)
    return widened


def _finite(value: float) -> bool:
    return math.isfinite(value)


_POSITIVE_INTS = ("batch_size", "hidden", "eval_every", "evals_per_epoch", "batch_dependency")

# (names, accepts(*values), message: a format string of the values {0}, {1} and the first name's {default})
RANGES: tuple[tuple[tuple[str, ...], Callable[..., bool], str], ...] = (
    *(((name,), lambda v: v >= 1, f"--{name.replace('_', '-')} must be a positive int; got {{0}}. "
       f"HINT: e.g. --{name.replace('_', '-')} {{default}}") for name in _POSITIVE_INTS),
    (("link_val", "link_test"), lambda val, test: 0 < val and 0 < test and val + test < 1,
     "--link-val and --link-test must be positive shares that sum below 1; got {0} and {1}. "
     "HINT: e.g. --link-val 0.05 --link-test 0.1"),
    (("link_tails", "hits_k"), lambda tails, k: tails >= 1 and k >= 1,
     "--link-tails and --hits-k must be positive; got {0} and {1}. HINT: e.g. --link-tails 100 --hits-k 10"),
    (("warmup_epochs",), lambda v: _finite(v) and v >= 0,
     "--warmup-epochs must be a finite number >= 0; got {0}. HINT: e.g. --warmup-epochs 1"),
    (("embed_dim", "embed_lr"), lambda dim, lr: dim >= 0 and _finite(lr) and lr > 0,
     "--embed-dim must be >= 0 and --embed-lr positive; got {0} and {1}. HINT: e.g. --embed-dim 64 --embed-lr 0.1 "
     "(a finite rate)"),
    (("target_val",), lambda v: 0 <= v <= 1,
     "--target-val must be a score in [0, 1] (0: none); got {0}. HINT: e.g. --target-val 0.97"),
    (("target_test",), lambda v: 0 <= v <= 1,
     "--target-test must be a score in [0, 1] (0: none); got {0}. HINT: e.g. --target-test 0.96"),
    (("lr",), lambda v: _finite(v) and v > 0, "--lr must be a finite positive number; got {0}. HINT: e.g. --lr 0.003"),
    (("dropout",), lambda v: 0 <= v < 1,
     "--dropout must be a probability in [0, 1); got {0}. HINT: e.g. --dropout 0.5, or 0 for none"),
    (("weight_decay",), lambda v: _finite(v) and v >= 0,
     "--weight-decay must be a finite number >= 0; got {0}. HINT: e.g. --weight-decay 0.0005, or 0 for none"),
    (("seed",), lambda v: 0 <= v < 2 ** 63, "--seed must be an int in [0, 2**63); got {0}. HINT: e.g. --seed 0"),
    (("threads",), lambda v: v >= 0, "--threads must be >= 0; got {0}. HINT: 0 means automatic"),
    (("prep_timeout",), lambda v: 0 < v < math.inf,
     "--prep-timeout must be positive seconds; got {0}. HINT: e.g. --prep-timeout 3600"),
    (("collective_timeout",), lambda v: 0 < v < math.inf,
     "--collective-timeout must be positive seconds; got {0}. HINT: e.g. --collective-timeout 300"),
    (("epochs",), lambda v: v >= 0,
     "--epochs must be >= 0; got {0}. HINT: e.g. --epochs 20, or leave it out (0) to train until validation stops "
     "improving"),
    (("patience",), lambda v: v >= 0,
     "--patience expected evaluations >= 0; got {0}. HINT: e.g. --patience 5, or 0: never stop early with --epochs "
     "(without it: the converge rule's)"),
    (("labor_iterations",), lambda v: 0 <= v <= 16,
     "--labor-iterations must be in [0, 16]; got {0}. HINT: e.g. --labor-iterations 3, or 0 for LABOR-0"),
    (("max_steps",), lambda v: v >= 0, "--max-steps must be >= 0; got {0}. HINT: 0 means every batch"),
    (("eval_batch_size",), lambda v: v >= 0,
     "--eval-batch-size must be >= 0; got {0}. HINT: e.g. --eval-batch-size 4096, or 0 for the default"),
    (("keep_checkpoints",), lambda v: v >= 1,
     "--keep-checkpoints expected at least 1; got {0}. HINT: --keep-checkpoints 2 (the default)"),
)


def check_ranges(values: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> None:
    """Check every RANGES row whose names `values` has (their types are checked already: `check_types`).

    Raises:
        ConfigError: the first row refused, as one line with its HINT (`defaults` fill the examples).
    """
    for names, accepts, message in RANGES:
        if all(name in values for name in names):
            args = [values[name] for name in names]
            if not accepts(*args):
                raise ConfigError(message.format(*args, default=(defaults or {}).get(names[0], "")))


_GIB = 2 ** 30


def estimate_step_bytes(hidden: int, layers: int, seeds: int, *, model: str = "sage", task: str = "node",
                        decoder: str = "dot") -> int:
    """A lower bound of the bytes one rank's model and one training step take, from the flags alone.

    Formula (fp32: 4 bytes a number):
        weights     = 16 * m * s * hidden**2  (+ 16 * hidden**2 for --decoder mlp)
        activations =  8 * a * hidden * seeds
    where 16 bytes is a weight, its gradient and Adam's two moments; m the hidden x hidden matrices of a layer
    (2 for sage: lin_l and lin_r; 1 for gcn, gat, rgcn); s the layers mapping hidden to hidden: all but the
    first (whose input is the features) and, for --task node, the last (whose output is the classes); a the
    layers whose output is hidden wide (layers - 1, or layers for --task link), each kept with its gradient
    for at least the step's `seeds` rows. The feature width, class count and graph size are not known at
    config time and count as nothing; the sampled neighbourhood (batch x the product of the fanouts, before
    nodes shared by several seeds are merged) is left out too: on a small graph it can overstate the rows many
    times. So a config refused by this estimate cannot fit; one accepted may still not.
    """
    link = task == "link"
    per_layer = 2 if model == "sage" else 1
    square = max(0, layers - 2) + int(link)
    weights = 16 * (per_layer * square + int(link and decoder == "mlp")) * hidden * hidden
    activations = 8 * max(0, layers - 1 + int(link)) * hidden * seeds
    return weights + activations


def check_memory(estimate: int, available: int | None, what: str, hint: str = "") -> None:
    """Refuse when `estimate` bytes (`estimate_step_bytes` times the ranks sharing the memory) exceed
    `available` (None: unknown, nothing refused).

    Raises:
        ConfigError: the estimate, what it covers (`what`), the bytes available and a HINT.
    """
    if available is None or estimate <= available:
        return
    hint = hint or "a smaller --hidden or --batch-size, fewer layers (--fanout), or fewer ranks per host"
    raise ConfigError(f"expected the model and one training step to fit in the available memory; got an estimate "
                      f"of at least {estimate / _GIB:.1f} GiB ({what}) where {available / _GIB:.1f} GiB is "
                      f"available. HINT: {hint} (docs/failures.md)")
