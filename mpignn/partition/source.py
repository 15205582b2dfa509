"""Where this rank's part comes from: the partition folder, made once by rank 0 or given (`--partitions`) and
checked, delivered to hosts that do not see it, then loaded. Imports data, partition, mpi and graph_options,
never torch.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, TYPE_CHECKING

import numpy as np

from mpignn.data import dataset_source, load_dataset, source_present
from mpignn.data.split_file import check_readable, splits_tag
from mpignn.errors import DatasetError, PartitionFormatError
from mpignn.fileio import refuse_unwritable
from mpignn.config.graph_options import GraphOptions
from mpignn.mpi import root_first
from mpignn.mpi.collectives import checked
from mpignn.partition import LocalPart, check_matches, load_partition, partition_graph, read_meta
from mpignn.partition.format import check_source, check_splits
from mpignn.partition.deliver import deliver_partition, held_by_hosts
from mpignn.partition.links import has_link_split, load_link_split

if TYPE_CHECKING:
    from mpignn.launch.bootstrap import Runtime

__all__ = ["auto_folder", "ensure_partition", "load_part"]

log = logging.getLogger(__name__)


def auto_folder(root: str, key: str, method: str, num_parts: int, seed: int, source: str = "") -> Path:
    """Where training without --partitions keeps the partition it makes. A `source` other than the key adds its
    digest: a regenerated npz gets a partition of its own, the same content at another path finds its own."""
    safe = key.replace("/", "_").replace(":", "_").replace(",", "_").replace("=", "")
    if source and source != key:
        safe += "-" + hashlib.sha256(source.encode()).hexdigest()[:12]
    return Path(root) / "mpignn-parts" / f"{safe}-{method}-{num_parts}p-s{seed}"


def _given_view(opts: GraphOptions) -> tuple[str | None, str, str]:
    """Rank 0's view for --partitions: (dataset source or None if absent here, split tag, why splits unreadable)."""
    try:
        if opts.splits:
            check_readable(opts.splits)
    except DatasetError as exc:
        return None, "", str(exc)
    present = source_present(opts.dataset, opts.root)
    return (dataset_source(opts.dataset, opts.root, opts.splits) if present else None), splits_tag(opts.splits), ""


def ensure_partition(rt: Runtime, opts: GraphOptions, key: str, part_id: int,
                     link_params: dict[str, Any] | None = None) -> Path:
    """Collective over `rt.comm`: the partition folder, checked (`opts.partitions`) or made once by rank 0
    (per host with `local_prep`), and delivered to hosts that do not see it; `link_params`: edges it must hold."""
    comm = rt.comm
    num_parts = 1 if opts.replicated else rt.world_size
    if opts.partitions:
        folder = Path(opts.partitions)
        deliver_partition(comm, folder, part_id, force=opts.force)  # to hosts that lack the parts they load
        source, tag, unreadable = comm.bcast(_given_view(opts) if comm.rank == 0 else None, root=0)
        with checked(comm, PartitionFormatError):
            if unreadable:
                raise DatasetError(unreadable)
            meta = read_meta(folder)
            check_splits(meta, folder, tag, opts.splits, opts.dataset)
            same = check_source(meta, folder, source, opts.dataset, opts.root)
            if meta.source is None and comm.rank == 0 and source is not None and "|" in source:
                log.warning("%s records no fingerprint of the files it was made from (an older mpignn made it), so "
                            "it cannot be checked against %s as it is now. HINT: partition again with python -m "
                            "mpignn.partition ... --force to record it", folder, opts.dataset)
            # the same content at another path is the same dataset; a changed one was refused just above
            check_matches(meta, folder, num_parts=num_parts, dataset=None if same else key)
            if link_params is not None and not has_link_split(folder, link_params):
                raise PartitionFormatError(f"expected held-out edges {link_params} in {folder}/links; found "
                                           "none or others. HINT: partition with python -m mpignn.partition "
                                           "--task link and the same --seed and --link-* flags, or drop --partitions")
        return folder
    # rank 0's view, since other hosts may not see the files; other splits get a partition of their own
    source = comm.bcast(dataset_source(opts.dataset, opts.root, opts.splits) if comm.rank == 0 else None, root=0)
    # a user's file by its kind only (npz, npy), not its path: the source's digest tells one file from another
    kind = key[:3] if key.startswith(("npz:", "npy:")) else key
    folder = auto_folder(opts.root, kind + ("-links" if link_params else ""), opts.partition_method, num_parts,
                         opts.seed, source)
    usable = None if link_params is None else (lambda f: has_link_split(f, link_params))  # noqa: E731
    # another host's copy is delivered, never made again; with --local-prep each host holds its own
    held = None if opts.local_prep else held_by_hosts(comm, folder, part_id, usable)
    with root_first(comm, per_host=opts.local_prep, timeout=opts.prep_timeout,
                    what=f"preparing {opts.dataset}") as first:
        if first and not (held if held is not None else
                          (folder / "META.json").is_file() and (usable is None or usable(folder))):
            # a read-only --root, a full disk: one line, not a traceback
            with refuse_unwritable("--root", opts.root, f"{opts.dataset} can be prepared",
                                   "a writable --root, or prepare it once where it is writable (python -m "
                                   "mpignn.partition, or a first run) and use that prepared root as it is "
                                   "(read-only works)"):
                graph = load_dataset(opts.dataset, opts.root, splits=opts.splits)
                # source: what --partitions checks the folder against later
                rep = partition_graph(graph, num_parts, folder, method=opts.partition_method, seed=opts.seed,
                                      dataset=key, force=True, links=link_params, source=source)
            log.info("partitioned %s into %d parts (%s): edge cut %.1f%%, %.1fs", key, num_parts, opts.partition_method,
                     rep["edge_cut_pct"], rep["seconds"])
            del graph
    deliver_partition(comm, folder, part_id, force=opts.force, usable=usable)
    return folder


def load_part(comm: Any, folder: Path, part_id: int, link_params: dict | None) -> tuple[LocalPart, dict | None]:
    """Collective over `comm`: this rank's part (memory-mapped) and held-out pairs; a bad file fails everywhere."""
    part, held_out = None, None
    with checked(comm, PartitionFormatError):
        part = load_partition(folder, part_id, mmap=True)
        if link_params is not None:
            held_out = load_link_split(folder, np.asarray(part.meta.part_offsets), part_id)
    return part, held_out
