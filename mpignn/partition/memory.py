"""A PyG graph held in memory by rank 0, checked, cut as a partition folder would hold it, and sent to every
rank as buffers in chunks (no file written, nothing pickled). Imports data, partition and mpi, never torch.
"""
from __future__ import annotations

import collections
import socket
from typing import Any

import numpy as np

from mpignn.data.pyg import MEMORY_NAME, graph_from_pyg
from mpignn.errors import ConfigError, DatasetError, PartitionFormatError, mark_agreed
from mpignn.mpi import check_all, root_first
from mpignn.mpi.watchdog import bounded
from mpignn.partition.assign import split_and_assign
from mpignn.partition.format import HETERO_FILES, PART_FILES, LocalPart, meta_from_json
from mpignn.partition.links import in_partition_ids, link_share
from mpignn.partition.write import parts_in_memory

__all__ = ["scatter_graph", "send_arrays", "recv_arrays", "CHUNK_BYTES"]

CHUNK_BYTES = 1 << 26
"""Bytes per message (MPI counts are C ints: an array of any size goes in pieces); tests lower it."""
_TAG = 7301
_LINKS = "links/"  # the prefix of held-out edge arrays among a part's arrays in transit
_ERRORS = {cls.__name__: cls for cls in (ConfigError, DatasetError, PartitionFormatError)}


def scatter_graph(comm: Any, data: Any, part_id: int, *, num_parts: int, method: str, seed: int,
                  links: dict | None = None, timeout: float | None = None) -> tuple[LocalPart, dict | None]:
    """Collective over `comm`: (this rank's part of rank 0's graph `data`, cut as `partition_graph` cuts it, its
    held-out edges or None). A graph that fails a check is the same line on every rank; rank 0 failing otherwise,
    or past `timeout` seconds, is a RootFailedError."""
    part_ids = comm.gather(int(part_id), root=0)
    cut, problem = None, None
    with root_first(comm, timeout=timeout, what="checking and partitioning the in-memory graph") as first:
        if first:
            try:
                cut = _cut(data, num_parts, method, seed, links)
            except (ConfigError, DatasetError, PartitionFormatError) as exc:
                problem = (type(exc).__name__, str(exc))
    problem = comm.bcast(problem, root=0)
    if problem is not None:  # rank 0's own message on every rank, not a report of rank 0 failing
        raise mark_agreed(_ERRORS[problem[0]](problem[1]))
    meta = comm.bcast(cut[0] if comm.rank == 0 else None, root=0)
    received = ""
    with bounded("sending the in-memory graph's parts", limit=timeout or 0.0):
        if comm.rank == 0:
            parts = cut[1]
            mine = parts[part_ids[0]]
            left = collections.Counter(part_ids[1:])
            for dest, p in enumerate(part_ids[1:], start=1):
                send_arrays(comm, parts[p], dest)
                left[p] -= 1
                if not left[p] and p != part_ids[0]:
                    parts[p] = None  # sent to every rank that holds it
            del cut, parts
        else:
            mine, received = recv_arrays(comm, 0)
    check_all(comm, not received, received, ConfigError)
    held_out = {k[len(_LINKS):]: v for k, v in mine.items() if k.startswith(_LINKS)}
    arrays = {k: mine[k] for k in PART_FILES + HETERO_FILES if k in mine}
    part = LocalPart(meta=meta_from_json(meta), part_id=int(part_id), **arrays)
    return part, (held_out if links is not None else None)


def _cut(data: Any, num_parts: int, method: str, seed: int,
         links: dict | None) -> tuple[dict, list[dict[str, np.ndarray]]]:
    """Rank 0: (META.json's content, each part's arrays and its held-out edges, keyed `links/NAME`)."""
    graph = graph_from_pyg(data)
    graph, parts, held_out, method = split_and_assign(graph, num_parts, method, seed, links)
    node_map, meta, arrays = parts_in_memory(graph, parts, num_parts=num_parts, method=method, seed=seed,
                                             dataset=MEMORY_NAME)
    if held_out is not None:
        mapped = in_partition_ids(held_out, node_map)
        offsets = np.asarray(meta["part_offsets"], dtype=np.int64)
        for p in range(num_parts):
            arrays[p].update({_LINKS + k: np.ascontiguousarray(v) for k, v in link_share(mapped, offsets, p).items()})
    return meta, arrays


def _bytes(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def send_arrays(comm: Any, arrays: dict[str, np.ndarray], dest: int) -> None:
    """Point-to-point to `dest` (which calls `recv_arrays`): names, dtypes and shapes, then each array's bytes
    in messages of at most CHUNK_BYTES."""
    from mpi4py import MPI

    arrays = {name: np.ascontiguousarray(a) for name, a in arrays.items()}
    comm.send([(name, a.dtype.str, a.shape) for name, a in arrays.items()], dest=dest, tag=_TAG)
    for flat in map(_bytes, arrays.values()):
        for lo in range(0, flat.size, CHUNK_BYTES):
            comm.Send([flat[lo:lo + CHUNK_BYTES], MPI.BYTE], dest=dest, tag=_TAG)


def recv_arrays(comm: Any, source: int) -> tuple[dict[str, np.ndarray], str]:
    """Point-to-point from `source`: ({name: array}, '' or why this rank could not hold them). Every message is
    received even after a failure, so the sender never blocks."""
    from mpi4py import MPI

    heads = comm.recv(source=source, tag=_TAG)
    out: dict[str, np.ndarray] = {}
    problem, scratch = "", None
    for name, dtype, shape in heads:
        dtype = np.dtype(dtype)
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        flat = None
        if not problem:
            try:
                out[name] = np.empty(shape, dtype=dtype)
                flat = _bytes(out[name])
            except MemoryError:
                problem = (f"expected memory for this rank's part ({size / 2**20:.0f} MiB for {name}) on "
                           f"{socket.gethostname()}; got MemoryError. HINT: run on more hosts or ranks, or "
                           "partition to a folder (python -m mpignn.partition) and load it by name")
        for lo in range(0, size, CHUNK_BYTES):
            n = min(CHUNK_BYTES, size - lo)
            if flat is None and (scratch is None or len(scratch) < n):  # drain what the sender sends anyway
                scratch = np.empty(n, dtype=np.uint8)
            comm.Recv([flat[lo:lo + n] if flat is not None else scratch[:n], MPI.BYTE], source=source, tag=_TAG)
    return out, problem
