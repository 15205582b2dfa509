"""Each config value's type, range or choices (beside the field: `opt`), and a lower bound of one step's memory,
so a wrong TOML type or an impossible number fails in one line before anything loads. Stdlib only."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable, Mapping

from mpignn.config.choices import check_choice
from mpignn.errors import ConfigError

__all__ = ["RANGES", "opt", "check_config", "check_types", "estimate_step_bytes", "check_memory"]


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
    """Check each of `values` against its field's annotation (ConfigError names key, flag, type and value); bools
    only for bool (a TOML "false" is a string). Return the ints given for float fields, as floats, to replace."""
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


def opt(default: Any, *, choices: Iterable[str] = (), accepts: Callable[[Any], bool] | None = None,
        problem: str = "", hint: str = "") -> Any:
    """Return a config field whose allowed values (`choices`, or `accepts`) sit beside it for `check_config`; the
    refusal's HINT is `hint`, else "e.g. --flag DEFAULT"."""
    meta: dict[str, Any] = {"choices": choices} if choices else {}  # read when checked: registries grow
    if accepts is not None:
        meta["accepts"] = (accepts, problem, hint)
    return dataclasses.field(default=default, metadata=meta)


# Ranges that read several fields: (names, accepts(*values), message of the values {0}, {1})
RANGES: tuple[tuple[tuple[str, ...], Callable[..., bool], str], ...] = (
    (("link_val", "link_test"), lambda val, test: 0 < val and 0 < test and val + test < 1,
     "--link-val and --link-test must be positive shares that sum below 1; got {0} and {1}. "
     "HINT: e.g. --link-val 0.05 --link-test 0.1"),
    (("link_tails", "hits_k"), lambda tails, k: tails >= 1 and k >= 1,
     "--link-tails and --hits-k must be positive; got {0} and {1}. HINT: e.g. --link-tails 100 --hits-k 10"),
    (("embed_dim", "embed_lr"), lambda dim, lr: dim >= 0 and math.isfinite(lr) and lr > 0,
     "--embed-dim must be >= 0 and --embed-lr positive; got {0} and {1}. HINT: e.g. --embed-dim 64 --embed-lr 0.1 "
     "(a finite rate)"),
)


def check_config(config: Any, normalise: Callable[[], None] | None = None) -> None:
    """Run a frozen dataclass's checks: `check_types` (widening ints), `normalise()`, then each field against its
    `opt` and the RANGES rows; ConfigError for the first value refused."""
    specs = dataclasses.fields(config)
    for name, value in check_types({f.name: getattr(config, f.name) for f in specs}, {f.name: f.type for f in specs},
                                   {f.name: f.default for f in specs}).items():
        object.__setattr__(config, name, value)
    if normalise is not None:
        normalise()
    for f in specs:
        value, flag = getattr(config, f.name), "--" + f.name.replace("_", "-")
        if "accepts" in f.metadata:
            accepts, problem, hint = f.metadata["accepts"]
            if not accepts(value):
                raise ConfigError(f"{flag} {problem}; got {value}. HINT: {hint or f'e.g. {flag} {f.default:g}'}")
        if "choices" in f.metadata:
            check_choice(f.name, value, tuple(f.metadata["choices"]))
    for names, accepts, message in RANGES:
        if all(hasattr(config, name) for name in names):
            args = [getattr(config, name) for name in names]
            if not accepts(*args):
                raise ConfigError(message.format(*args))


_GIB = 2 ** 30


def estimate_step_bytes(hidden: int, layers: int, seeds: int, *, model: str = "sage", task: str = "node",
                        decoder: str = "dot") -> int:
    """Return a lower bound of the bytes one rank's model and one training step take, from the flags alone.

    Formula (fp32):
        weights     = 16 * m * s * hidden**2  (+ 16 * hidden**2 for --decoder mlp)
        activations =  8 * a * hidden * seeds
    16 bytes: a weight, its gradient, Adam's two moments; m: hidden x hidden matrices a layer (2 for sage);
    s: layers mapping hidden to hidden; a: layers with hidden-wide output, kept with their gradient. Features,
    classes and the sampled neighbourhood (which can overstate many times) count as nothing: a config refused
    cannot fit; one accepted may still not.
    """
    link = task == "link"
    per_layer = 2 if model == "sage" else 1
    square = max(0, layers - 2) + int(link)
    weights = 16 * (per_layer * square + int(link and decoder == "mlp")) * hidden * hidden
    activations = 8 * max(0, layers - 1 + int(link)) * hidden * seeds
    return weights + activations


def check_memory(estimate: int, available: int | None, what: str, hint: str = "") -> None:
    """Refuse (ConfigError naming `what` the estimate covers) when `estimate` bytes exceed `available` (None:
    unknown, nothing refused)."""
    if available is None or estimate <= available:
        return
    hint = hint or "a smaller --hidden or --batch-size, fewer layers (--fanout), or fewer ranks per host"
    raise ConfigError(f"expected the model and one training step to fit in the available memory; got an estimate "
                      f"of at least {estimate / _GIB:.1f} GiB ({what}) where {available / _GIB:.1f} GiB is "
                      f"available. HINT: {hint} (docs/failures.md)")
