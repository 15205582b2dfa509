"""`python -m mpignn.bench.labor_star`: input rows per step of LABOR-i (importance sampling, i iterations) against
LABOR-0 and neighbour sampling, on one process holding the whole graph: whether the importance-sampling variant
would reach what issue 40 asks of it (half neighbour sampling's rows) before it is built into the samplers.

LABOR-i (Balın and Çatalyürek, NeurIPS 2023): every source s of a hop has a weight pi_s (1 for LABOR-0); target
t keeps s where s's variate r_s is under p_ts = min(1, c_t pi_s), with c_t chosen so that the p_ts of t's
neighbours sum to the fanout k (each target still keeps k in expectation). An iteration sets pi_s to
max_t p_ts: a source some target must keep with high probability is then kept by the others too, so a hop's
sources concentrate on fewer nodes. The variates are `sampling.labor`'s, so 0 iterations draws exactly what
`--sampler labor` draws (checked on every run). Rows only: the weights such batches need (1 / p_ts per edge) and
the accuracy they train to are not measured here.

Example: python -m mpignn.bench.labor_star --iterations 0,1,2,3
"""
from __future__ import annotations

import argparse

import numpy as np
from numba import njit

from mpignn.bench._common import table
from mpignn.config.train_config import parse_fanout
from mpignn.sampling import kernels, labor


@njit(cache=False)
def _scales(rowptr, col, targets, fanout, pi):
    """c_t of each target (inf where it keeps every neighbour): sum over t's neighbours of min(1, c_t pi_s) = k."""
    out = np.empty(len(targets))
    for i in range(len(targets)):
        start, end = rowptr[targets[i]], rowptr[targets[i] + 1]
        deg = end - start
        if fanout < 0 or deg <= fanout:
            out[i] = np.inf
            continue
        weights = np.sort(pi[col[start:end]])[::-1]
        rest = weights.sum()
        c = fanout / rest
        for j in range(deg):  # the j heaviest saturate (c * pi >= 1); the others share k - j
            c = (fanout - j) / rest
            if c * weights[j] < 1.0:
                break
            rest -= weights[j]
        out[i] = c
    return out


@njit(cache=False)
def _raise_weights(rowptr, col, targets, scale, pi, new):
    """new_s = max over the hop's targets t of min(1, c_t pi_s), for the sources of `targets`."""
    for i in range(len(targets)):
        for e in range(rowptr[targets[i]], rowptr[targets[i] + 1]):
            new[col[e]] = 0.0
    for i in range(len(targets)):
        for e in range(rowptr[targets[i]], rowptr[targets[i] + 1]):
            s = col[e]
            new[s] = max(new[s], min(1.0, scale[i] * pi[s]))


def labor_hop(rowptr: np.ndarray, col: np.ndarray, targets: np.ndarray, fanout: int, seed: int, iterations: int,
              pi: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The sources LABOR-`iterations` keeps for `targets` under hop seed `seed` (-1 iterations: until no
    weight moves by 1e-4, at most 100). `pi` and `new` are node-sized scratch, left at 1."""
    sources = np.unique(col[np.concatenate([np.arange(rowptr[t], rowptr[t + 1]) for t in targets])])
    done = 0
    while iterations < 0 or done < iterations:
        _raise_weights(rowptr, col, targets, _scales(rowptr, col, targets, fanout, pi), pi, new)
        moved = np.abs(new[sources] - pi[sources]).max() if len(sources) else 0.0
        pi[sources] = new[sources]
        done += 1
        if (iterations < 0 and moved < 1e-4) or done >= 100:
            break
    scale = _scales(rowptr, col, targets, fanout, pi)
    r = np.zeros(len(new))
    r[sources] = labor.variate(seed, sources)
    kept = []
    for i, t in enumerate(targets):
        nbrs = col[rowptr[t]:rowptr[t + 1]]
        kept.append(nbrs[r[nbrs] < np.minimum(1.0, scale[i] * pi[nbrs])])
    pi[sources] = 1.0
    return np.concatenate(kept) if kept else np.empty(0, dtype=np.int64)


def rows_per_hop(rowptr: np.ndarray, col: np.ndarray, seeds: np.ndarray, fanouts: list[int], seed: int,
                 iterations: int, scratch: tuple[np.ndarray, np.ndarray], same_variates: bool = False) -> list[int]:
    """New nodes of each hop of a LABOR-`iterations` batch around `seeds` (hop seeds as `NeighborSampler`'s; with
    `same_variates` every hop draws the first hop's: DGL's `layer_dependency`)."""
    seen = set(seeds.tolist())
    frontier, counts = seeds, [len(seeds)]
    for hop, fanout in enumerate(fanouts):
        kept = labor_hop(rowptr, col, frontier, fanout, kernels.mix_seed(seed, 0 if same_variates else hop),
                         iterations, *scratch)
        fresh = [s for s in dict.fromkeys(kept.tolist()) if s not in seen]
        seen.update(fresh)
        frontier = np.array(fresh, dtype=np.int64)
        counts.append(len(fresh))
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpignn.bench.labor_star", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic", help="a dataset name (default: the embedded graph)")
    parser.add_argument("--root", default="data")
    parser.add_argument("--fanout", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--iterations", default="0,1,2,*", help="LABOR-i variants to count (* : to convergence)")
    parser.add_argument("--same-variates", action="store_true",
                        help="also each variant with one variate per node for every hop (DGL's layer_dependency)")
    args = parser.parse_args(argv)
    from mpignn.data import load_dataset
    from mpignn.sampling import LocalHops, NeighborSampler

    graph = load_dataset(args.dataset, args.root)
    fanouts = parse_fanout(args.fanout)
    rowptr, col = np.asarray(graph.rowptr, dtype=np.int64), np.asarray(graph.col, dtype=np.int64)
    rng = np.random.default_rng(0)
    batches = [np.sort(rng.choice(graph.train_idx, args.batch_size, replace=False)) for _ in range(args.batches)]
    samplers = {m: NeighborSampler(LocalHops(rowptr, col), graph.num_nodes, fanouts, method=m)
                for m in ("neighbor", "labor")}
    scratch = (np.ones(graph.num_nodes), np.zeros(graph.num_nodes))
    rows = []
    for method, sampler in samplers.items():
        hops = np.mean([sampler.sample(b, 11 + i).num_sampled_nodes for i, b in enumerate(batches)], axis=0)
        rows.append({"sampler": method if method == "neighbor" else "labor (LABOR-0, --sampler labor)",
                     "hops": hops})
    for same in (False, True) if args.same_variates else (False,):
        for text in args.iterations.split(","):
            iterations = -1 if text.strip() == "*" else int(text)
            counts = [rows_per_hop(rowptr, col, b, fanouts, 11 + i, iterations, scratch, same)
                      for i, b in enumerate(batches)]
            if iterations == 0 and not same:  # the same draws as the sampler's own LABOR-0
                want = [samplers["labor"].sample(b, 11 + i).num_sampled_nodes for i, b in enumerate(batches)]
                if counts != want:
                    raise SystemExit(f"LABOR-0 here drew {counts}, --sampler labor {want}: the bench is wrong")
            rows.append({"sampler": f"LABOR-{text.strip()}" + (", same variates every hop" if same else ""),
                         "hops": np.mean(counts, axis=0)})
    base = rows[0]["hops"].sum()
    for row in rows:
        row["input"] = row["hops"].sum()
        row["vs"] = row["input"] / base
        row["per_hop"] = " / ".join(f"{v:,.0f}" for v in row["hops"][1:])
    print(f"{args.dataset}: fanout {args.fanout}, batch {args.batch_size}, mean of {args.batches} batches, one "
          "process")
    print(table(rows, [("sampler", "sampler", "s"), ("input", "input rows/step", ",.0f"),
                       ("vs", "x neighbor", ".2f"), ("per_hop", "new rows per hop", "s")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
