"""`python -m mpignn.bench.labor_star`: input rows per step of LABOR-i (`--labor-iterations i`) against LABOR-0
and neighbour sampling, and what each batch costs to draw, on one process holding the whole graph.

LABOR-i (Balın and Çatalyürek, NeurIPS 2023; `sampling.labor.labor_importance`) weights each source of a hop
so that targets sharing a neighbour agree on it more often: a hop reaches fewer sources, each edge carrying an
importance weight that keeps the mean unbiased. This bench counts the rows and times the draws; the accuracy
such batches train to is measured by `python -m mpignn.bench` (`+laborI` configs).

Example: python -m mpignn.bench.labor_star --iterations 0,1,3,8 --same-variates
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from mpignn.bench._common import table
from mpignn.config.graph_options import parse_fanout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpignn.bench.labor_star", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic", help="a dataset name (default: the embedded graph)")
    parser.add_argument("--root", default="data")
    parser.add_argument("--fanout", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--iterations", default="0,1,3", help="LABOR-i variants to count, comma-separated")
    parser.add_argument("--same-variates", action="store_true",
                        help="also each variant with one variate per node for every hop (--layer-dependency)")
    args = parser.parse_args(argv)
    from mpignn.data import load_dataset
    from mpignn.sampling import LocalHops, NeighborSampler, kernels, labor

    graph = load_dataset(args.dataset, args.root)
    fanouts = parse_fanout(args.fanout)
    hops = LocalHops(np.asarray(graph.rowptr, dtype=np.int64), np.asarray(graph.col, dtype=np.int64))
    rng = np.random.default_rng(0)
    batches = [np.sort(rng.choice(graph.train_idx, args.batch_size, replace=False)) for _ in range(args.batches)]
    kernels.warm_up()
    labor.warm_up(importance=True)
    variants = [("neighbor", dict(method="neighbor"))]
    for same in (False, True) if args.same_variates else (False,):
        for text in args.iterations.split(","):
            name = f"LABOR-{int(text)}" + (", one variate per node for every hop" if same else "")
            variants.append((name, dict(method="labor", iterations=int(text), layer_dependency=same)))
    rows = []
    for name, kwargs in variants:
        sampler = NeighborSampler(hops, graph.num_nodes, fanouts, **kwargs)
        sampler.sample(batches[0], 10)  # the id map and the kernels' first call
        start = time.perf_counter()
        outs = [sampler.sample(b, 11 + i) for i, b in enumerate(batches)]
        ms = 1000 * (time.perf_counter() - start) / len(batches)
        hop_rows = np.mean([o.num_sampled_nodes for o in outs], axis=0)
        rows.append({"sampler": name, "hops": hop_rows, "ms": ms,
                     "edges": np.mean([len(o.row) for o in outs])})
    base = rows[0]["hops"].sum()
    for row in rows:
        row["input"] = row["hops"].sum()
        row["vs"] = row["input"] / base
        row["per_hop"] = " / ".join(f"{v:,.0f}" for v in row["hops"][1:])
    print(f"{args.dataset}: fanout {args.fanout}, batch {args.batch_size}, mean of {args.batches} batches, one "
          "process, one thread per kernel call as numba runs it here")
    print(table(rows, [("sampler", "sampler", "s"), ("input", "input rows/step", ",.0f"),
                       ("vs", "x neighbor", ".2f"), ("edges", "edges/step", ",.0f"),
                       ("per_hop", "new rows per hop", "s"), ("ms", "draw ms/step", ".1f")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
