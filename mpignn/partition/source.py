"""Where this rank's part comes from: the partition folder, made once by rank 0 (`auto_folder`) or given
(`--partitions`) and checked, delivered to hosts that do not see it, then this rank's part loaded.

Collective functions over MPI; imports data, partition, mpi and graph_options, never torch (sampling and the
loader are built on top of it by `runtime.build_local_graph`).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, TYPE_CHECKING

import numpy as np

from mpignn.data import dataset_source, load_dataset
from mpignn.errors import MpignnError, PartitionFormatError
from mpignn.config.graph_options import GraphOptions
from mpignn.mpi import check_all, root_first
from mpignn.partition import LocalPart, check_matches, load_partition, partition_graph, read_meta
from mpignn.partition.deliver import deliver_partition
from mpignn.partition.links import has_link_split, load_link_split

if TYPE_CHECKING:
    from mpignn.launch.bootstrap import Runtime

__all__ = ["auto_folder", "ensure_partition", "load_part"]

log = logging.getLogger(__name__)


def auto_folder(root: str, key: str, method: str, num_parts: int, seed: int, source: str = "") -> Path:
    """Where training without --partitions keeps the partition it makes (benchmarks reuse it). A `source`
    (`data.dataset_source`) other than the key adds its digest to the name: a regenerated npz, or another file
    at the same relative path, gets a partition of its own."""
    import hashlib

    safe = key.replace("/", "_").replace(":", "_").replace(",", "_").replace("=", "")
    if source and source != key:
        safe += "-" + hashlib.sha256(source.encode()).hexdigest()[:12]
    return Path(root) / "mpignn-parts" / f"{safe}-{method}-{num_parts}p-s{seed}"


def ensure_partition(rt: Runtime, opts: GraphOptions, key: str, part_id: int) -> Path:
    """Collective over `rt.comm`: the partition folder, checked (`opts.partitions`) or made once by rank 0
    (per host with `local_prep`), and delivered to hosts that do not see it."""
    comm, link_params = rt.comm, opts.link_params
    num_parts = 1 if opts.replicated else rt.world_size
    if opts.partitions:
        folder = Path(opts.partitions)
        deliver_partition(comm, folder, part_id, force=opts.force)  # to hosts that do not see rank 0's folder
        problem = ""
        try:
            check_matches(read_meta(folder), folder, num_parts=num_parts, dataset=key)
            if link_params is not None and not has_link_split(folder, link_params):
                raise PartitionFormatError(f"expected held-out edges {link_params} in {folder}/links; found "
                                           "none or others. HINT: partition with python -m mpignn.partition "
                                           "--task link and the same --seed and --link-* flags, or drop --partitions")
        except MpignnError as exc:
            problem = str(exc)
        check_all(comm, not problem, problem, PartitionFormatError)
        return folder
    # rank 0's view of the files (other hosts may not see them): path and content, not the name as typed
    source = comm.bcast(dataset_source(opts.dataset, opts.root) if comm.rank == 0 else None, root=0)
    folder = auto_folder(opts.root, key + ("-links" if opts.links else ""), opts.method, num_parts, opts.seed,
                         source)
    ready = lambda: (folder / "META.json").is_file() and (  # noqa: E731
        link_params is None or has_link_split(folder, link_params))
    with root_first(comm, per_host=opts.local_prep, timeout=opts.prep_timeout,
                    what=f"preparing {opts.dataset}") as first:
        if first and not ready():
            graph = load_dataset(opts.dataset, opts.root)
            rep = partition_graph(graph, num_parts, folder, method=opts.method, seed=opts.seed, dataset=key,
                                  force=True, links=link_params)
            log.info("partitioned %s into %d parts (%s): edge cut %.1f%%, %.1fs", key, num_parts, opts.method,
                     rep["edge_cut_pct"], rep["seconds"])
            del graph
    deliver_partition(comm, folder, part_id, force=opts.force)
    return folder


def load_part(comm: Any, folder: Path, part_id: int, link_params: dict | None) -> tuple[LocalPart, dict | None]:
    """Collective over `comm`: this rank's part (memory-mapped) and its held-out pairs; a bad file fails on
    every rank alike."""
    problem, part, held_out = "", None, None
    try:
        part = load_partition(folder, part_id, mmap=True)
        if link_params is not None:
            held_out = load_link_split(folder, np.asarray(part.meta.part_offsets), part_id)
    except MpignnError as exc:
        problem = str(exc)
    check_all(comm, not problem, problem, PartitionFormatError)
    return part, held_out
