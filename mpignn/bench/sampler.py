"""`python -m mpignn.bench.sampler`: sampled batches/s and edges/s, mpignn against PyG's NeighborLoader; with
`--labor I,...` instead the input rows per step of LABOR-i (Balın and Çatalyürek, NeurIPS 2023) against LABOR-0
and neighbour sampling, on one process. The accuracy such batches train to is `python -m mpignn.bench`'s.
"""
from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from mpignn.bench._common import bench_parser, pyg_python, run_bench, run_reference, table
from mpignn.config.graph_options import parse_fanout
from mpignn.data import load_dataset
from mpignn.data.graph import GraphData
from mpignn.sampling import LocalHops, NeighborSampler, kernels, labor


def measure(graph: GraphData, fanout: list[int], batch_size: int, batches: int, threads: int) -> dict:
    numba.set_num_threads(threads)
    sampler = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, fanout)
    rng = np.random.default_rng(0)
    seeds = [np.sort(rng.choice(graph.train_idx, batch_size, replace=False)) for _ in range(batches + 1)]
    sampler.sample(seeds[0], 0)  # compile / warm-up
    edges, start = 0, time.perf_counter()
    for i, s in enumerate(seeds[1:]):
        edges += sum(sampler.sample(s, i).num_sampled_edges)
    seconds = time.perf_counter() - start
    return {"impl": "mpignn", "threads": threads, "batches_per_s": batches / seconds, "edges_per_s": edges / seconds}


def labor_rows(graph: GraphData, args: argparse.Namespace) -> int:
    """Print `--labor`'s table: rows, edges and draw milliseconds per step of each sampler variant."""
    hops = LocalHops(np.asarray(graph.rowptr, dtype=np.int64), np.asarray(graph.col, dtype=np.int64))
    rng = np.random.default_rng(0)
    batches = [np.sort(rng.choice(graph.train_idx, args.batch_size, replace=False)) for _ in range(args.batches)]
    kernels.warm_up()
    labor.warm_up(importance=True)
    variants = [("neighbor", dict(method="neighbor"))]
    for same in (False, True) if args.same_variates else (False,):
        for text in args.labor.split(","):
            name = f"LABOR-{int(text)}" + (", one variate per node for every hop" if same else "")
            variants.append((name, dict(method="labor", iterations=int(text), layer_dependency=same)))
    rows = []
    for name, kwargs in variants:
        sampler = NeighborSampler(hops, graph.num_nodes, parse_fanout(args.fanout), **kwargs)
        sampler.sample(batches[0], 10)  # the id map and the kernels' first call
        start = time.perf_counter()
        outs = [sampler.sample(b, 11 + i) for i, b in enumerate(batches)]
        ms = 1000 * (time.perf_counter() - start) / len(batches)
        rows.append({"sampler": name, "hops": np.mean([o.num_sampled_nodes for o in outs], axis=0), "ms": ms,
                     "edges": np.mean([len(o.row) for o in outs])})
    base = rows[0]["hops"].sum()
    for row in rows:
        row.update(input=row["hops"].sum(), vs=row["hops"].sum() / base,
                   per_hop=" / ".join(f"{v:,.0f}" for v in row["hops"][1:]))
    print(f"{args.dataset}: fanout {args.fanout}, batch {args.batch_size}, mean of {args.batches} batches, one "
          "process, one thread per kernel call as numba runs it here")
    print(table(rows, [("sampler", "sampler", "s"), ("input", "input rows/step", ",.0f"),
                       ("vs", "x neighbor", ".2f"), ("edges", "edges/step", ",.0f"),
                       ("per_hop", "new rows per hop", "s"), ("ms", "draw ms/step", ".1f")]))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("mpignn.bench.sampler", __doc__,
                          graphs=("200000:20,2000000:25", "NODES:AVG_DEGREE,... (synthetic)"), features=100,
                          fanout="15,10,5", batch_size=1024, batches=20, threads="1,2",
                          dataset=("synthetic", "--labor: a dataset name (default: the embedded graph)"), root="data")
    parser.add_argument("--pyg-python", help="interpreter with torch-geometric + pyg-lib or torch-sparse")
    parser.add_argument("--labor", help="LABOR-i variants to count against neighbour sampling, comma-separated")
    parser.add_argument("--same-variates", action="store_true",
                        help="--labor: also each variant with one variate per node for every hop (--layer-dependency)")
    args = parser.parse_args(argv)
    fanout = parse_fanout(args.fanout)
    if args.labor:
        return labor_rows(load_dataset(args.dataset, args.root), args)
    try:
        graphs = [tuple(int(v) for v in item.split(":")) for item in args.graphs.split(",")]
        thread_counts = [int(t) for t in args.threads.split(",")]
    except ValueError:
        graphs = []
    if not graphs or any(len(g) != 2 for g in graphs):
        parser.error(f"--graphs takes NODES:DEGREE pairs and --threads counts, comma-separated; got --graphs "
                     f"{args.graphs} --threads {args.threads}. HINT: --graphs 200000:20,2000000:25 --threads 1,2")
    ref = pyg_python(args.pyg_python)
    rows = []
    for nodes, degree in graphs:
        spec = f"synthetic:num_nodes={nodes},avg_degree={degree},num_features={args.features}"
        graph = load_dataset(spec)
        for threads in thread_counts:
            group = [measure(graph, fanout, args.batch_size, args.batches, threads)]
            if ref:
                group.append(run_reference(ref, "sample", "--dataset", spec, "--fanout", args.fanout,
                                           "--batch-size", str(args.batch_size), "--batches",
                                           str(args.batches), "--threads", str(threads)))
            base = group[-1]["batches_per_s"] if ref else None
            for row in group:
                row.update(graph=f"{nodes // 1000}k/deg {degree}", edges_m=row["edges_per_s"] / 1e6,
                           vs_pyg=row["batches_per_s"] / base if base else None)
                rows.append(row)
        del graph
    print(f"fanout {args.fanout}, batch {args.batch_size}, {args.batches} batches"
          + ("" if ref else " (PyG column skipped: no pyg-lib or torch-sparse; see --pyg-python)"))
    print(table(rows, [("graph", "graph", "s"), ("impl", "sampler", "s"), ("threads", "threads", "d"),
                       ("batches_per_s", "batches/s", ".2f"), ("edges_m", "M edges/s", ".2f"),
                       ("vs_pyg", "x PyG", ".1f")]))
    return 0


if __name__ == "__main__":
    run_bench(main)
