"""Splitting work over ranks, with equal step counts so DDP never waits on a rank that stopped."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from mpignn.mpi.topology import mpi_op
from mpignn.mpi.watchdog import bounded

__all__ = ["chunk_bounds", "ceil_split", "steps_per_epoch", "pad_to_steps"]


def chunk_bounds(n: int, size: int, rank: int) -> tuple[int, int]:
    """Return [start, stop) of `rank`'s chunk of n items in `size` chunks; the first `n % size` hold one more."""
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"need 0 <= rank < size; got rank={rank}, size={size}")
    base, extra = divmod(int(n), size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def ceil_split(items: Sequence | np.ndarray | int, size: int, rank: int) -> Any:
    """Return `rank`'s share of `items` (or of `range(items)` for an int); see `chunk_bounds`."""
    if isinstance(items, (int, np.integer)):
        return range(*chunk_bounds(int(items), size, rank))
    start, stop = chunk_bounds(len(items), size, rank)
    return items[start:stop]


def steps_per_epoch(comm: Any, num_local: int, batch_size: int, drop_last: bool = False) -> int:
    """Collective over `comm` (None or one rank: this rank's own count): return the steps every rank runs: the
    most items' count (with drop_last, the fewest's), so DDP never waits on a rank that stopped."""
    steps = num_local // batch_size if drop_last else -(-num_local // batch_size)
    if comm is None or comm.size == 1:
        return steps
    with bounded("steps_per_epoch (allreduce)"):
        return int(comm.allreduce(steps, op=mpi_op("MIN" if drop_last else "MAX")))


def pad_to_steps(indices: np.ndarray, steps: int, batch_size: int, drop_last: bool = False) -> list[np.ndarray]:
    """Cut `indices` into exactly `steps` batches of at most `batch_size` items, evenly.

    With fewer items than steps they wrap around, so no batch is empty (unless there are none at all).
    """
    n = len(indices)
    if drop_last:
        return [indices[i * batch_size:(i + 1) * batch_size] for i in range(steps)]
    if n >= steps or n == 0:
        if -(-n // steps) > batch_size:
            raise ValueError(f"{n} items do not fit {steps} batches of {batch_size}; use steps_per_epoch()")
        return np.array_split(indices, steps)  # the first n % steps one longer, as chunk_bounds
    return [indices[i % n:i % n + 1] for i in range(steps)]
