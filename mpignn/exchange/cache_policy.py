"""The remote-feature cache policy: which remote rows a rank caches and how many (`--cache-size`; the policy
in docs/launchers-and-devices.md).
"""
from __future__ import annotations

import logging
import time
from typing import Sequence, TYPE_CHECKING

import numpy as np

from mpignn.env import mem_available_bytes
from mpignn.exchange.features import FeatureStore
from mpignn.mpi import allreduce_max
from mpignn.partition import LocalPart
from mpignn.sampling.access import access_frequency
from mpignn.sampling.neighbor import LocalHops

if TYPE_CHECKING:
    from mpignn.launch.bootstrap import Runtime

__all__ = ["cache_budget", "build_cache", "spare_memory", "AUTO_CACHE_MEMORY_SHARE", "MIN_FETCHES_PER_EPOCH",
           "AUTO_CACHE_FALLBACK_ROWS"]

log = logging.getLogger(__name__)


# `--cache-size auto`: the caches of a host's ranks together take at most this share of the memory the host
# has available at start-up (the rest stays for batches, the model, and the other ranks' growth) ...
AUTO_CACHE_MEMORY_SHARE = 0.25
# ... and hold only remote nodes that sampling is expected to fetch at least once in 10 epochs: a row fetched
# less often saves less traffic over 10 epochs than its start-up fetch costs, and holds memory all along.
MIN_FETCHES_PER_EPOCH = 0.1
# Where the available memory is unknown (no /proc/meminfo), `auto` takes at most this many rows.
AUTO_CACHE_FALLBACK_ROWS = 50_000
# Seeds per batch the access estimate assumes. It only shapes how a hub's visits saturate within one batch
# (a node is fetched once per batch however often it is visited), never the order of the ranking.
_ESTIMATE_BATCH = 1024


def cache_budget(cache_size: int | str, row_bytes: int, reachable: int, worth: int, spare_bytes: int | None,
                 ranks_sharing: int) -> int:
    """Rows of this rank's remote-feature cache: `cache_size` rows, never beyond the `reachable` remote nodes, or
    "auto": AUTO_CACHE_MEMORY_SHARE of `spare_bytes` (None: unknown) per rank sharing it, capped by `worth`, the
    remote nodes expected to be fetched at least MIN_FETCHES_PER_EPOCH times per epoch.
    """
    if cache_size != "auto":
        return max(0, min(int(cache_size), reachable))
    if spare_bytes is None:
        return min(AUTO_CACHE_FALLBACK_ROWS, worth)
    share = AUTO_CACHE_MEMORY_SHARE * max(0, spare_bytes) / max(1, ranks_sharing)
    return min(int(share // max(1, row_bytes)), worth)


def build_cache(rt: Runtime, local: LocalHops, part: LocalPart, fanouts: Sequence[int], features: FeatureStore,
                cache_size: int | str, seeds: np.ndarray) -> tuple[int, float]:
    """Collective over `rt.comm`: rank remote nodes by expected fetches, size the budget, fetch the rows.
    Returns (rows, MiB) of the largest cache of any rank."""
    comm = rt.comm
    t0 = time.perf_counter()
    # per-edge-type fanouts (heterogeneous graphs) are estimated as their sum over the types
    per_hop = [f if np.ndim(f) == 0 else (-1 if min(f) < 0 else int(sum(f))) for f in fanouts]
    gids, fetches = access_frequency(comm, local, np.asarray(part.meta.part_offsets), seeds, per_hop,
                                     _ESTIMATE_BATCH)
    remote = (gids < part.lo) | (gids >= part.hi)
    gids, fetches = gids[remote], fetches[remote]
    worth = int((fetches >= MIN_FETCHES_PER_EPOCH).sum())
    spare, sharing = spare_memory(rt, features) if cache_size == "auto" else (None, 1)
    rows = cache_budget(cache_size, features.row_bytes, len(gids), worth, spare, sharing)
    hot = gids[np.argsort(-fetches, kind="stable")[:rows]]
    t1 = time.perf_counter()
    features.build_cache(hot)
    t2 = time.perf_counter()
    most = allreduce_max(comm, [len(features.cache_gid), features.cache_bytes / 2**20, worth, t1 - t0, t2 - t1])
    cache_rows, cache_mib = int(most[0]), float(most[1])
    if rt.rank == 0:
        why = f"--cache-size {cache_size}"
        if cache_size == "auto":
            why += (f": {AUTO_CACHE_MEMORY_SHARE:.0%} of {spare / 2**30:.1f} GiB available over {sharing} ranks, "
                    if spare is not None else f": memory unknown, at most {AUTO_CACHE_FALLBACK_ROWS:,} rows, ")
            why += f"capped by the {int(most[2]):,} remote nodes worth caching"
        log.info("feature cache: %s rows, %.1f MiB per rank at most (%s); access estimate %.2fs, fetch %.2fs",
                 f"{cache_rows:,}", cache_mib, why, most[3], most[4])
    return cache_rows, cache_mib


def spare_memory(rt: Runtime, features: FeatureStore) -> tuple[int | None, int]:
    """(bytes a cache may come out of, ranks sharing them): the host's, or the device's for a device table."""
    if features.on_host or features.x.device.type == "cpu":
        return mem_available_bytes(), rt.topo.local_size
    from mpignn.launch.device import free_memory

    return free_memory(features.x.device), rt.choice.shared_by  # ranks of this host computing in this device's memory
