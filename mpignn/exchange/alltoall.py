"""The two transports for variable-size all-to-all. Ids always travel by MPI; feature rows by MPI on host
buffers, or by torch.distributed on tensors (with NCCL/xccl, GPU to GPU without touching the host).
`IdDirectory` maps dataset node ids to partition ids with each rank holding the map of one block of dataset
ids (a ceiling-division share), so no rank holds a map of the whole graph."""
from __future__ import annotations

from typing import Any

import numpy as np

from mpignn.mpi import alltoallv, exchange_counts
from mpignn.partition.format import group_by_owner

__all__ = ["MpiAlltoall", "TorchAlltoall", "make_alltoall", "IdDirectory"]


class MpiAlltoall:
    """Collective over `comm`: mpi4py Alltoallv on numpy buffers (its speed: docs/launchers-and-devices.md)."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm

    def __call__(self, send: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """Collective: ids grouped by destination -> (ids by source, counts per source, whether replies go in
        pieces)."""
        recv_counts, pieces = exchange_counts(self.comm, counts)
        return alltoallv(self.comm, send, counts, recv_counts, pieces)[0], recv_counts, pieces

    def close(self) -> None:
        """Collective: free the communicator (a transport built for a while, e.g. `--minibatch tune`'s probe)."""
        self.comm.Free()

    def rows(self, send: Any, send_counts: np.ndarray, recv_counts: np.ndarray, pieces: bool | None = None) -> Any:
        """Collective: rows answering ids, both sides knowing the counts; tensor rows cross via host buffers
        (bfloat16 as its bits)."""
        if isinstance(send, np.ndarray):
            return alltoallv(self.comm, send, send_counts, recv_counts, pieces)[0]
        import torch

        bits = send.dtype == torch.bfloat16
        host = np.ascontiguousarray((send.view(torch.int16) if bits else send).detach().cpu().numpy())
        got = alltoallv(self.comm, host, send_counts, recv_counts, pieces)[0]
        got = torch.from_numpy(np.ascontiguousarray(got)).to(send.device, non_blocking=True)
        return got.view(torch.bfloat16) if bits else got


class TorchAlltoall(MpiAlltoall):
    """Ids by MPI over `comm`; rows by `all_to_all_single` in a process group of its own, so a loader thread
    never interleaves with DDP's collectives. Constructor: collective over `comm` and the default group.
    """

    def __init__(self, comm: Any, device: str) -> None:
        import torch

        super().__init__(comm)
        self.torch, self.device = torch, torch.device(device)
        self.group = torch.distributed.new_group()
        comm.Barrier()  # every rank's connect is done before any may tear the group down (dist.init_process_group)

    def rows(self, send: Any, send_counts: np.ndarray, recv_counts: np.ndarray, pieces: bool | None = None) -> Any:
        """Collective: tensor rows in, tensor rows out on `device` (numpy in, numpy out)."""
        torch = self.torch
        as_numpy = isinstance(send, np.ndarray)
        send_t = (torch.from_numpy(np.ascontiguousarray(send)) if as_numpy else send.contiguous()).to(self.device)
        recv_t = torch.empty((int(np.sum(recv_counts)),) + tuple(send_t.shape[1:]), dtype=send_t.dtype,
                             device=self.device)
        torch.distributed.all_to_all_single(recv_t, send_t, output_split_sizes=[int(c) for c in recv_counts],
                                            input_split_sizes=[int(c) for c in send_counts], group=self.group)
        return recv_t.cpu().numpy() if as_numpy else recv_t

    def close(self) -> None:
        """Collective: free the communicator and the process group."""
        self.torch.distributed.destroy_process_group(self.group)
        super().close()


def make_alltoall(kind: str, comm: Any, device: str) -> MpiAlltoall:
    """`auto` and `mpi` -> MPI (host tables, where MPI is fastest); `torch` -> torch.distributed (collective)."""
    return TorchAlltoall(comm, device) if kind == "torch" else MpiAlltoall(comm)


class IdDirectory:
    """Collective over `comm` (None: one process): built from each rank's own nodes, `dataset_ids[i]` being
    partition id `lo + i`; `lookup` answers any dataset id.
    """

    def __init__(self, comm: Any, dataset_ids: np.ndarray, lo: int, num_nodes: int) -> None:
        self.comm, self.num_nodes = comm, int(num_nodes)
        ids = np.asarray(dataset_ids, dtype=np.int64)
        size = 1 if comm is None else comm.size
        self.block = max(1, -(-self.num_nodes // size))
        self._offsets = self.block * np.arange(size + 1, dtype=np.int64)  # rank r keeps the map of block r
        pairs = np.stack([ids, lo + np.arange(len(ids), dtype=np.int64)], axis=1)
        if comm is None:
            got = pairs
        else:
            _, order, counts = group_by_owner(ids, self._offsets, size)
            got, _ = alltoallv(comm, pairs[order], counts)
        self.rank = 0 if comm is None else comm.rank
        self._part = np.full(min(self.block, max(0, self.num_nodes - self.rank * self.block)), -1, dtype=np.int64)
        self._part[got[:, 0] - self.rank * self.block] = got[:, 1]

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Collective over `comm` (every rank, also with no ids): the partition ids of dataset ids `ids`."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.comm is None:
            return self._part[ids]
        _, order, counts = group_by_owner(ids, self._offsets, self.comm.size)
        asked, asked_counts = alltoallv(self.comm, ids[order], counts)
        answer = self._part[asked - self.rank * self.block]
        back, _ = alltoallv(self.comm, answer, asked_counts)
        out = np.empty(len(ids), dtype=np.int64)
        out[order] = back
        return out
