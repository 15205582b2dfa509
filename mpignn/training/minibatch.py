"""`--minibatch auto`: time both ways of splitting a batch over ranks on the run's own first batches, and train
with the faster.

Whether cooperative mini-batches pay depends on what no formula here can know in advance: how much the ranks'
neighbourhoods overlap (the rows `independent` computes twice) against what each layer's exchange and its
synchronisation cost on this network and these devices. On a 2-core VM the exchange always lost; on GPUs with a
fast interconnect the published gains are large. So `auto` measures: both modes train the same first steps of
epoch 0 (weights, buffers, optimizer and random streams untouched: gradients are computed and dropped), taking
turns, and cooperative is kept only where its steps are at least `MARGIN` faster on the slowest rank.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, TYPE_CHECKING

import torch

from mpignn.training.checkpoint import rng_state, set_rng_state
from mpignn.training.epoch import train_epoch
from mpignn.training.record import redundancy
from mpignn.mpi import allreduce_max, allreduce_sum

if TYPE_CHECKING:
    from mpignn.launch.bootstrap import Runtime

__all__ = ["Probe", "choose_minibatch", "PROBE_STEPS", "ROUNDS", "MARGIN"]

log = logging.getLogger(__name__)

PROBE_STEPS = 2
"""Timed steps per pass, after one untimed step (JIT compilation, first-touch allocations)."""
ROUNDS = 3
"""Passes per mode, the modes taking turns: a neighbour's burst of load slows both, and each mode keeps its
fastest pass (as timeit does)."""
MARGIN = 0.10
"""Cooperative must take at most (1 - MARGIN) of independent's time per step: within the noise, the mode with
fewer moving parts wins."""


@dataclass
class Probe:
    """One mode's measured steps: seconds per step on the slowest rank, rows computed over the rows of the
    union of the ranks' batches (the largest over the layers), and the hidden rows' bytes per step."""

    step_s: float
    redundancy: float | None
    halo_step_bytes: float


class _Discard:
    """An optimizer that drops the gradients: the probe's steps leave the weights as they were."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.model.zero_grad(set_to_none=True)

    def step(self) -> None:
        self.model.zero_grad(set_to_none=True)


def choose_minibatch(rt: Runtime, model: torch.nn.Module, make_loader: Callable[[str], Any], *, task: Any,
                     bf16: bool = False, refusal: str = "") -> tuple[str, dict[str, Probe]]:
    """Collective over `rt.comm`: "cooperative" or "independent", and what each measured.

    Args:
        make_loader: `mode -> training loader` of that mode (collective), capped at 1 + PROBE_STEPS steps; its
            epoch 0 is what training's epoch 0 draws.
        refusal: why cooperative cannot train this run ("" where it can): then nothing is measured.
    """
    refusal = refusal or ("one rank" if rt.world_size == 1 else "")
    probes: dict[str, Probe] = {}
    if not refusal:
        saved = rng_state(rt.device)  # dropout draws: training then starts from the state it would have had
        buffers = [b.detach().clone() for b in model.buffers()]  # --norm batch's running statistics, likewise
        loader = make_loader("independent")
        if len(loader) < 1 + PROBE_STEPS:  # the same step count on every rank
            refusal = f"an epoch of {len(loader)} steps is too short to measure"
        else:
            loaders = {"independent": loader, "cooperative": make_loader("cooperative")}
            passes = [{mode: _measure(rt, model, loaders[mode], task, bf16) for mode in loaders}
                      for _ in range(ROUNDS)]
            probes = {mode: min((p[mode] for p in passes), key=lambda probe: probe.step_s) for mode in loaders}
            loaders["cooperative"].sampler.close()  # training builds its own loader: free the probe's comms
        set_rng_state(saved, rt.device)
        with torch.no_grad():
            for buffer, before in zip(model.buffers(), buffers):
                buffer.copy_(before)
        model.zero_grad(set_to_none=True)
    if refusal:
        if rt.rank == 0:
            log.info("--minibatch auto: independent (%s)", refusal.split(". HINT")[0])
        return "independent", probes
    ind, coop = probes["independent"], probes["cooperative"]
    mode = "cooperative" if coop.step_s <= (1 - MARGIN) * ind.step_s else "independent"
    if rt.rank == 0:
        log.info("--minibatch auto: %s | independent %.3fs/step (redundancy %s), cooperative %.3fs/step "
                 "(halo %.1f MiB/step); the fastest of %d passes of %d steps each", mode, ind.step_s,
                 _fmt(ind.redundancy), coop.step_s, coop.halo_step_bytes / 2**20, ROUNDS, PROBE_STEPS)
    return mode, probes


class _Clock:
    """A loader that notes when each step is done (its batch trained: the next one is asked for)."""

    def __init__(self, loader: Any) -> None:
        self.loader, self.start_step, self.done = loader, loader.start_step, []

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Any:
        for batch in self.loader:
            yield batch
            self.done.append(time.perf_counter())


def _measure(rt: Runtime, model: torch.nn.Module, loader: Any, task: Any, bf16: bool) -> Probe:
    """Collective: `loader`'s first 1 + PROBE_STEPS steps of epoch 0, the first untimed."""
    loader.set_epoch(0, 0, 1 + PROBE_STEPS)
    halo0 = getattr(loader.sampler, "halo_bytes", 0)
    clock = _Clock(loader)
    sums = train_epoch(model, clock, _Discard(model), task=task, device=rt.device, bf16=bf16, comm=rt.comm)
    seconds = clock.done[-1] - clock.done[0]
    steps = max(sums["steps"], 1.0)
    layers = range(len(loader.sampler.fanouts) + 1)  # 0: the input rows
    local = [getattr(loader.sampler, "halo_bytes", 0) - halo0,
             *(sums.get(f"{name}_{j}", 0.0) for j in layers for name in ("counted_rows", "union_rows"))]
    total = allreduce_sum(rt.comm, local).tolist()
    share = redundancy(total[1::2], total[2::2])
    return Probe(step_s=float(allreduce_max(rt.comm, [seconds])[0]) / (len(clock.done) - 1),
                 redundancy=share, halo_step_bytes=total[0] / steps)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
