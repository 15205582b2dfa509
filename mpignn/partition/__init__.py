"""Graph partitioning: assign nodes to parts (METIS or random), write the part folder, load one part.

Public API: `partition_graph`, `load_partition`, `read_meta`, `PartitionMeta`, `LocalPart`. numpy and pymetis
only (no torch).
"""
from __future__ import annotations

import os

from mpignn.data.graph import GraphData
from mpignn.partition.assign import METHODS, assign_parts
from mpignn.partition.format import (LocalPart, PartitionMeta, check_matches, load_partition, part_dir, read_meta,
                                     report, write_partition)

__all__ = ["partition_graph", "load_partition", "read_meta", "check_matches", "PartitionMeta", "LocalPart",
           "METHODS", "part_dir", "format_report"]


def partition_graph(graph: GraphData, num_parts: int, out: str | os.PathLike, *, method: str = "metis",
                    seed: int = 0, dataset: str | None = None, force: bool = False) -> dict:
    """Cut `graph` into `num_parts` parts and write them to `out`; returns the report (see format_report)."""
    import time

    start = time.perf_counter()
    parts = assign_parts(graph, num_parts, method, seed)
    meta = write_partition(graph, parts, out, num_parts=num_parts, method=method, seed=seed,
                           dataset=dataset or graph.name, force=force)
    return report(meta, time.perf_counter() - start)


def format_report(rep: dict) -> str:
    """The human-readable report printed at the end of partitioning."""
    lines = [
        f"partitioned {rep['dataset']} into {rep['num_parts']} parts with {rep['method']} "
        f"in {rep['seconds']:.1f}s",
        f"  edge cut        {rep['edge_cut']} edges ({rep['edge_cut_pct']:.2f}% of all edges)",
        f"  balance max/avg nodes {rep['node_balance']:.3f}  edges {rep['edge_balance']:.3f}  "
        f"train nodes {rep['train_balance']:.3f}",
        "  part   nodes      halo",
    ]
    lines += [f"  {p:4d} {n:8d} {h:9d}" for p, (n, h) in enumerate(zip(rep["nodes"], rep["halo"]))]
    return "\n".join(lines)
