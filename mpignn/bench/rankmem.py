"""`python -m mpignn.bench.rankmem`: per-rank bytes of the access estimate and of the link AUC, before (arrays
over every node; every score on every rank) and now (arrays over the rank's part; its own scores and one chunk),
by formula at 2M and 10M nodes and measured (tracemalloc peak, max over ranks) under `mpiexec -n R` on a
synthetic graph. The "before" code is kept here, private, only to be measured. Imports no torch.

    python -m mpignn.bench.rankmem [--ranks 8] [--nodes 2000000,10000000] [--measure 2000000,10000000]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import tracemalloc
from typing import Any, Callable

import numpy as np

from mpignn.bench._common import mpiexec, table

__all__ = ["formula", "main"]

_FANOUTS = [10, 5]
_TRAIN = 0.01  # seeds: the training share of a rank's nodes
_EVAL = 0.1  # held-out share of the edges scored for AUC (one positive and one fixed negative each)


def formula(nodes: int, ranks: int, avg_degree: int) -> dict[str, Any]:
    """Bytes per rank of what depends on the graph's size, as the code allocates it: the estimate's dense
    arrays (before: float64 sums, int64 counts and a bool mask over every node; now: sums and mask over the
    part), the AUC's scores (before: every score and label on every rank, float64 each; now: this rank's and
    one chunk of another's)."""
    from mpignn.tasks.link_metrics import AUC_CHUNK

    scored = int(_EVAL * nodes * avg_degree)  # held-out pairs x 2 (positive, negative) = _EVAL x directed edges
    return {"nodes": nodes, "ranks": ranks, "how": "formula", "access_before": 17 * nodes / 2**20,
            "access_now": 9 * -(-nodes // ranks) / 2**20, "auc_before": 16 * scored / 2**20,
            "auc_now": (16 * -(-scored // ranks) + 8 * AUC_CHUNK) / 2**20}


def _old_sum_by_id(ids: np.ndarray, values: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The estimate's summation before: dense over every node when the ids are many for the id space."""
    if len(ids) * 8 >= num_nodes:
        sums = np.bincount(ids, weights=values, minlength=num_nodes)
        keep = np.flatnonzero(np.bincount(ids, minlength=num_nodes) > 0)
        return keep, sums[keep]
    uniq, inverse = np.unique(ids, return_inverse=True)
    return uniq, np.bincount(inverse, weights=values, minlength=len(uniq))


def _old_auc(comm: Any, scores: np.ndarray, labels: np.ndarray) -> float:
    """The link AUC before: every rank's scores and labels gathered on every rank, then ranked."""
    from mpi4py import MPI

    from mpignn.tasks.link_metrics import auc

    local = np.stack([scores, labels], axis=1).reshape(-1)
    counts = np.array(comm.allgather(local.size), dtype=np.int64)
    out = np.empty(int(counts.sum()))
    comm.Allgatherv(local, [out, (counts, np.concatenate([[0], np.cumsum(counts)[:-1]])), MPI.DOUBLE])
    return auc(out[0::2], out[1::2])


def _traced(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """(fn's result, its traced peak in MiB, seconds)."""
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, peak, seconds


def _worker(nodes: int, avg_degree: int) -> None:
    """Under mpiexec: this rank's part of a uniform random graph, its estimate and its AUC share, each run
    the old way and the new; rank 0 prints the max over ranks as JSON."""
    from mpignn.tasks.link_metrics import global_auc
    from mpignn.mpi import world
    from mpignn.sampling import access
    from mpignn.sampling.neighbor import LocalHops

    comm = world()
    rng = np.random.default_rng(comm.rank)
    offsets = np.array([nodes * r // comm.size for r in range(comm.size + 1)], dtype=np.int64)
    lo, hi = int(offsets[comm.rank]), int(offsets[comm.rank + 1])
    local = LocalHops(np.arange(hi - lo + 1, dtype=np.int64) * avg_degree,
                      rng.integers(0, nodes, (hi - lo) * avg_degree), lo)
    seeds = lo + rng.choice(hi - lo, int(_TRAIN * (hi - lo)), replace=False)
    estimate = lambda: access.access_frequency(comm, local, offsets, seeds, _FANOUTS, 1024)  # noqa: E731
    (ids, freq), now_mib, now_s = _traced(estimate)
    new_sum = access._sum_by_id
    access._sum_by_id = lambda i, v, own_range: _old_sum_by_id(i, v, nodes)  # noqa: E731
    try:
        (old_ids, old_freq), before_mib, before_s = _traced(estimate)
    finally:
        access._sum_by_id = new_sum
    same = bool(np.array_equal(ids, old_ids) and np.array_equal(freq, old_freq))
    scored = int(_EVAL * (hi - lo) * avg_degree)
    scores, labels = rng.standard_normal(scored), (np.arange(scored) % 2).astype(np.float64)
    auc_now, auc_now_mib, _ = _traced(lambda: global_auc(comm, scores, labels))
    auc_before, auc_before_mib, _ = _traced(lambda: _old_auc(comm, scores, labels))
    mine = [before_mib, now_mib, before_s, now_s, auc_before_mib, auc_now_mib]
    every = comm.gather((mine, same and auc_now == auc_before), root=0)  # collective: on every rank
    if comm.rank == 0:
        most, same = np.max([m for m, _ in every], axis=0), all(ok for _, ok in every)
        keys = ["access_before", "access_now", "access_before_s", "access_now_s", "auc_before", "auc_now"]
        print(json.dumps({"nodes": nodes, "ranks": comm.size, "how": "measured", "same": same,
                          **dict(zip(keys, most.tolist()))}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8, help="ranks (the formula's and the measured run's)")
    parser.add_argument("--nodes", default="2000000,10000000", help="node counts for the formula rows")
    parser.add_argument("--measure", default="2000000,10000000", help="node counts to measure ('' for none)")
    parser.add_argument("--avg-degree", type=int, default=10, help="in-edges per node")
    parser.add_argument("--json", action="store_true", help="also print each row as a JSON line")
    parser.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker, args.avg_degree)
        return 0
    rows = [formula(int(n), args.ranks, args.avg_degree) for n in args.nodes.split(",") if n]
    for n in [int(n) for n in args.measure.split(",") if n]:
        cmd = [mpiexec(), "-n", str(args.ranks), sys.executable, "-m", "mpignn.bench.rankmem", "--worker",
               str(n), "--avg-degree", str(args.avg_degree)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if out.returncode:
            sys.stderr.write(out.stdout[-3000:] + out.stderr[-3000:])
            return out.returncode
        rows.append(json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1]))
    print(f"per-rank MiB: access estimate (fanouts {_FANOUTS}, {_TRAIN:.0%} of nodes as seeds) and link AUC "
          f"({_EVAL:.0%} of {args.avg_degree} edges a node scored); 'same': results identical before/now")
    print(table(rows, [("nodes", "nodes", ",d"), ("ranks", "ranks", "d"), ("how", "how", "s"),
                       ("access_before", "estimate before", ".1f"), ("access_now", "estimate now", ".1f"),
                       ("access_before_s", "s before", ".2f"), ("access_now_s", "s now", ".2f"),
                       ("auc_before", "AUC before", ".1f"), ("auc_now", "AUC now", ".1f"), ("same", "same", "")]))
    if args.json:
        print("\n".join(json.dumps(row) for row in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
