"""`--minibatch auto` (`choose_minibatch`: counts, never a clock) and `tune` (`tune_minibatch`: timed on the
first steps); docs/training.md "Choosing the mode".
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, TYPE_CHECKING

import torch

from mpignn.training.checkpoint import rng_state, set_rng_state
from mpignn.training.epoch import train_epoch
from mpignn.training.record import redundancy
from mpignn.mpi import allreduce_max, allreduce_sum

if TYPE_CHECKING:
    from mpignn.launch.bootstrap import Runtime

__all__ = ["Probe", "StepCount", "choose_minibatch", "count_step", "tune_minibatch", "PROBE_STEPS", "ROUNDS",
           "MARGIN", "FULL_COVERAGE", "FULL_WORTH"]

log = logging.getLogger(__name__)

PROBE_STEPS = 2
"""Timed steps per pass, after one untimed step (JIT compilation, first-touch allocations)."""
ROUNDS = 3
"""Passes per mode, taking turns: a burst of load slows both; each keeps its fastest pass (as timeit does)."""
FULL_COVERAGE = 0.5
"""Count a full-graph step only where a mini-batch step's input rows reach this share of the nodes (below, the
whole graph's batch costs more than it could save)."""
FULL_WORTH = 3.0
"""Train full-graph where its step counts at most this many independent steps' multiply-adds."""
MARGIN = 0.10
"""Cooperative must take at most (1 - MARGIN) of independent's time per step: within the noise, the mode with
fewer moving parts wins."""


@dataclass
class Probe:
    """One mode's measured steps (slowest rank's seconds, `redundancy`, halo bytes per step)."""

    step_s: float
    redundancy: float | None
    halo_step_bytes: float


@dataclass(frozen=True)
class StepCount:
    """One step's work over all ranks: input rows, and per layer (first conv first) targets and edges."""

    inputs: float
    targets: tuple[float, ...]
    edges: tuple[float, ...]

    def cost(self, in_width: int, hidden: int) -> float:
        """Return SAGE-like multiply-adds over the layers: a model-independent yardstick for both sides of
        `choose_minibatch`'s ratio."""
        widths = [in_width] + [hidden] * (len(self.edges) - 1)
        return sum((e * w + 2.0 * t * w * hidden for t, e, w in zip(self.targets, self.edges, widths)), 0.0)


def count_step(rt: Runtime, loader: Any) -> StepCount:
    """Collective over `rt.comm`: draw and count `loader`'s first step of epoch 0, computing nothing."""
    if loader.minibatch != "full":  # a kept full batch has its one step
        loader.set_epoch(0, 0, 1)
    hops = len(loader.sampler.fanouts)
    local = [0.0] * (1 + 2 * hops)  # a rank without a batch (none: the step count is agreed) adds nothing
    for batch in loader:
        nodes, edges = list(batch.num_sampled_nodes), list(batch.num_sampled_edges)
        local = [float(sum(nodes)), *(float(sum(nodes[:hops - k])) for k in range(hops)),
                 *(float(sum(edges[:hops - k])) for k in range(hops))]
    total = allreduce_sum(rt.comm, local).tolist()  # as long as `local`: 1 + 2 * hops
    return StepCount(inputs=total[0], targets=tuple(total[1:1 + hops]), edges=tuple(total[1 + hops:]))


def choose_minibatch(rt: Runtime, make_loader: Callable[[str], Any], *, in_width: int, hidden: int,
                     num_nodes: int, full_refusal: str) -> tuple[str, str]:
    """Collective over `rt.comm` (`--minibatch auto`): return "full" or "independent" from counts alone, and why.
    `make_loader(mode)` builds a training loader (collective) whose epoch 0 is training's; `full_refusal` is
    `full_fit_problem`'s answer ("" where full can train)."""
    if full_refusal:
        return "independent", full_refusal.split(". HINT")[0]
    step = count_step(rt, make_loader("independent"))
    coverage = step.inputs / max(1, num_nodes)
    if coverage < FULL_COVERAGE:
        return "independent", f"a step covers {coverage:.2f} of the graph, under {FULL_COVERAGE}"
    full_loader = make_loader("full")
    full = count_step(rt, full_loader)
    _close(full_loader)
    ratio = full.cost(in_width, hidden) / max(step.cost(in_width, hidden), 1.0)
    mode = "full" if ratio <= FULL_WORTH else "independent"
    return mode, (f"a step covers {coverage:.2f} of the graph; a full-graph step counts {ratio:.2f} independent "
                  f"steps' multiply-adds, full at most {FULL_WORTH:g}")


def _close(loader: Any) -> None:
    if loader.sampler.cooperative:
        loader.sampler.close()


def tune_minibatch(rt: Runtime, model: torch.nn.Module, make_loader: Callable[[str], Any], *, task: Any,
                   bf16: bool = False, refusal: str = "", num_nodes: int = 0,
                   full_refusal: str = "one") -> tuple[str, dict[str, Probe]]:
    """Collective over `rt.comm` (`--minibatch tune`): return the fastest mode and what each measured.

    The probe leaves weights, RNG and buffers as they were. Rank 0 logs the flag that pins the choice.
    `make_loader` and `full_refusal` are as for `choose_minibatch` (full timed only past `FULL_COVERAGE`);
    `refusal` says why cooperative cannot train ("": it can, and is timed).
    """
    coverage = count_step(rt, make_loader("independent")).inputs / max(1, num_nodes) if not full_refusal else 0.0
    refusal = refusal or ("one rank" if rt.world_size == 1 else "")
    modes = ["independent", *(["cooperative"] if not refusal else []),
             *(["full"] if coverage >= FULL_COVERAGE else [])]
    probes: dict[str, Probe] = {}
    short = ""
    if len(modes) > 1:
        saved = rng_state(rt.device)  # dropout draws: training then starts from the state it would have had
        buffers = [b.detach().clone() for b in model.buffers()]  # --norm batch's running statistics, likewise
        loaders = {mode: make_loader(mode) for mode in modes}
        if len(loaders["independent"]) < 1 + PROBE_STEPS:  # the same step count on every rank
            short = f"an epoch of {len(loaders['independent'])} steps is too short to measure"
        else:
            passes = [{mode: _measure(rt, model, loaders[mode], task, bf16) for mode in loaders
                       if mode != "full" or not r}  # one full pass (`_measure`)
                      for r in range(ROUNDS)]
            probes = {mode: min((p[mode] for p in passes if mode in p), key=lambda probe: probe.step_s)
                      for mode in loaders}
        for loader in loaders.values():  # training builds its own loaders: free the probe's comms
            _close(loader)
        set_rng_state(saved, rt.device)
        with torch.no_grad():
            for buffer, before in zip(model.buffers(), buffers):
                buffer.copy_(before)
        model.zero_grad(set_to_none=True)
    mode = _pick(probes, "full" in modes and bool(short))
    if rt.rank == 0:
        if not probes:
            why = short or refusal.split(". HINT")[0] or full_refusal.split(". HINT")[0]
            log.info("--minibatch tune: %s (%s); pin it with --minibatch %s", mode, why, mode)
        else:
            timed = ", ".join(f"{m} {p.step_s:.3f}s/step" for m, p in probes.items())
            share = probes["independent"].redundancy
            log.info("--minibatch tune: %s | %s (redundancy %s%s); a step covers %.2f of the graph; the fastest "
                     "of %d passes of %d steps each; pin it with --minibatch %s", mode, timed,
                     "-" if share is None else f"{share:.2f}",
                     f", cooperative halo {probes['cooperative'].halo_step_bytes / 2**20:.1f} MiB/step"
                     if "cooperative" in probes else "", coverage, ROUNDS, PROBE_STEPS, mode)
    return mode, probes


def _pick(probes: dict[str, Probe], full_when_short: bool) -> str:
    if not probes:
        return "full" if full_when_short else "independent"
    ind = probes["independent"].step_s
    if "full" in probes and probes["full"].step_s <= FULL_WORTH * ind:
        return "full"
    if "cooperative" in probes and probes["cooperative"].step_s <= (1 - MARGIN) * ind:
        return "cooperative"
    return "independent"


class _Clock:
    """Notes when each step of `passes` passes over `loader` is done: when the next batch is asked for."""

    def __init__(self, loader: Any, passes: int = 1) -> None:
        self.loader, self.passes, self.start_step, self.done = loader, passes, loader.start_step, []

    def __len__(self) -> int:
        return len(self.loader) * self.passes

    def __iter__(self) -> Any:
        for _ in range(self.passes):
            for batch in self.loader:
                yield batch
                self.done.append(time.perf_counter())


def _measure(rt: Runtime, model: torch.nn.Module, loader: Any, task: Any, bf16: bool) -> Probe:
    """Collective: time `loader`'s first 1 + PROBE_STEPS steps of epoch 0, the first untimed."""
    full = loader.minibatch == "full"  # one timed full step: it is long, and its noise small
    if not full:
        loader.set_epoch(0, 0, 1 + PROBE_STEPS)
    halo0 = loader.sampler.counters().get("halo_bytes", 0)
    clock = _Clock(loader, 2 if full else 1)
    drop = lambda set_to_none=True: model.zero_grad(set_to_none=True)  # noqa: E731
    discard = SimpleNamespace(zero_grad=drop, step=drop)  # an optimizer that drops the gradients: weights unchanged
    sums = train_epoch(model, clock, discard, task=task, device=rt.device, bf16=bf16, comm=rt.comm)
    seconds = clock.done[-1] - clock.done[0]
    steps = max(sums["steps"], 1.0)
    layers = range(len(loader.sampler.fanouts) + 1)  # 0: the input rows
    local = [loader.sampler.counters().get("halo_bytes", 0) - halo0,
             *(sums.get(f"{name}_{j}", 0.0) for j in layers for name in ("counted_rows", "union_rows"))]
    total = allreduce_sum(rt.comm, local).tolist()
    share = redundancy(total[1::2], total[2::2])
    return Probe(step_s=float(allreduce_max(rt.comm, [seconds])[0]) / (len(clock.done) - 1),
                 redundancy=share, halo_step_bytes=total[0] / steps)
