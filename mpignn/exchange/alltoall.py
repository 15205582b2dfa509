"""The two transports for variable-size all-to-all. Ids always travel by MPI; feature rows by MPI on host
buffers, or by torch.distributed on tensors (with NCCL/xccl, GPU to GPU without touching the host)."""
from __future__ import annotations

from typing import Any

import numpy as np

from mpignn.mpi import alltoallv, exchange_counts

__all__ = ["MpiAlltoall", "TorchAlltoall", "make_alltoall", "staged"]


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
        """Collective: rows answering ids, both sides knowing the counts; tensor rows cross via host buffers."""
        if isinstance(send, np.ndarray):
            return alltoallv(self.comm, send, send_counts, recv_counts, pieces)[0]
        return staged(send, lambda host: alltoallv(self.comm, host, send_counts, recv_counts, pieces)[0])


def staged(rows: Any, move: Any) -> Any:
    """`move` (numpy in, numpy out) applied to tensor `rows` through host memory (bfloat16 as its bits)."""
    import torch

    bits = rows.dtype == torch.bfloat16
    host = np.ascontiguousarray((rows.view(torch.int16) if bits else rows).cpu().numpy())
    got = torch.from_numpy(np.ascontiguousarray(move(host))).to(rows.device)
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
        send_t = torch.from_numpy(np.ascontiguousarray(send)) if as_numpy else send.contiguous()
        send_t = send_t.to(self.device)
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
    if kind == "torch":
        return TorchAlltoall(comm, device)
    return MpiAlltoall(comm)
