"""Graph partitioning: assign nodes to parts (METIS, KaMinPar or random), write the part folder, load one part.

Layer 5 (partition): imports data and the layers below; never sampling, exchange or anything above, never torch.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from mpignn.config.choices import PARTITION_DEFAULT
from mpignn.data.graph import GraphData
from mpignn.fileio import remove_leftovers, temp_name
from mpignn.partition.assign import default_method, split_and_assign
from mpignn.partition.format import LocalPart, balance, check_matches, load_partition, read_meta, report
from mpignn.partition.links import save_link_split
from mpignn.partition.write import write_partition

__all__ = ["partition_graph", "load_partition", "read_meta", "check_matches", "LocalPart", "default_method",
           "format_report"]


def partition_graph(graph: GraphData, num_parts: int, out: str | os.PathLike, *, method: str = PARTITION_DEFAULT,
                    seed: int = 0, dataset: str | None = None, force: bool = False, threads: int = 1,
                    links: dict | None = None, source: str | None = None) -> dict:
    """Cut `graph` into `num_parts` parts and write them to `out`; returns the report (see format_report).

    `threads` is kaminpar's (0: all cores): above 1 is faster but gives other parts on every run. `links`
    ({"val", "test", "num_tails", "seed"}) holds those edge shares out first. `source` (`data.dataset_source`) is
    recorded in META.json, so training refuses the folder once the graph's files change.
    """
    final = Path(out).absolute()
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(final)  # what killed runs of this host left beside `out` (a partitioner killed for memory)
    # KaMinPar's input file: beside the output, not in a tmpfs
    workdir = temp_name(final, "parhip")
    start = time.perf_counter()
    try:
        graph, parts, held_out, method = split_and_assign(graph, num_parts, method, seed, links, workdir, threads)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assign_s = time.perf_counter() - start
    meta = write_partition(graph, parts, out, num_parts=num_parts, method=method, seed=seed,
                           dataset=dataset or graph.name, force=force, source=source)
    if held_out is not None:
        save_link_split(out, held_out, links)
    return {**report(meta, time.perf_counter() - start), "assign_seconds": assign_s}


def format_report(rep: dict) -> str:
    """The human-readable report printed at the end of partitioning."""
    lines = [
        f"partitioned {rep['dataset']} into {rep['num_parts']} parts with {rep['method']} "
        f"in {rep['seconds']:.1f}s ({rep.get('assign_seconds', 0.0):.1f}s assigning, the rest writing)",
        f"  edge cut        {rep['edge_cut']} edges ({rep['edge_cut_pct']:.2f}% of all edges)",
        f"  balance max/avg nodes {rep['node_balance']:.3f}  edges {rep['edge_balance']:.3f}  "
        f"train nodes {rep['train_balance']:.3f}",
        "  part   nodes      halo",
    ]
    lines += [f"  {p:4d} {n:8d} {h:9d}" for p, (n, h) in enumerate(zip(rep["nodes"], rep["halo"]))]
    for name, counts in (rep.get("type_nodes") or {}).items():
        lines.append(f"  type {name}: nodes per part {counts}, balance max/avg {balance(counts):.3f}")
    for name, cut in (rep.get("type_cut") or {}).items():
        lines.append(f"  edge type {name}: {cut} cut edges")
    return "\n".join(lines)
