"""Learnable node embeddings held by their owners, for nodes without features (DistDGL's DistEmbedding):
pulled from owners, gradients pushed back to a sparse optimizer there.

    emb = NodeEmbedding(part.hi - part.lo, 64, lo=part.lo, part_offsets=offsets, comm=comm)
    x = emb.pull(batch.n_id.cpu().numpy(), device)  # collective; a leaf tensor on `device` that takes gradients
    loss = model(x, ...); loss.backward()
    emb.step()                                      # collective: gradients to owners, sparse update there
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from mpignn.exchange.alltoall import MpiAlltoall
from mpignn.fileio import write_durable
from mpignn.mpi import alltoallv
from mpignn.partition.format import group_by_owner

__all__ = ["NodeEmbedding", "SparseAdagrad", "SparseAdam", "init_rows"]


def init_rows(seed: int, lo: int, num_rows: int, dim: int, scale: float = 1.0) -> np.ndarray:
    """Rows [lo, lo + num_rows) of a uniform(-scale, scale) table that depends only on (seed, global id), so
    it starts the same on any number of ranks."""
    out = np.empty((num_rows, dim), dtype=np.float32)
    salt = np.uint64((seed * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
    for a in range(0, num_rows, 1 << 16):
        b = min(num_rows, a + (1 << 16))
        x = (np.arange((lo + a) * dim, (lo + b) * dim, dtype=np.uint64) ^ salt) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
        unit = (x >> np.uint64(11)).astype(np.float64) * 2.0**-53
        out[a:b] = ((2.0 * unit - 1.0) * scale).reshape(b - a, dim)
    return out


class SparseAdagrad:
    """torch.optim.Adagrad (lr_decay 0, no weight decay) on the rows a step touched."""

    def __init__(self, rows: int, dim: int, lr: float = 0.01, eps: float = 1e-10) -> None:
        self.lr, self.eps = lr, eps
        self.sum = np.zeros((rows, dim), dtype=np.float32)

    def update(self, weight: np.ndarray, idx: np.ndarray, grad: np.ndarray) -> None:
        """Apply the summed gradients `grad` of the distinct local rows `idx`."""
        state = self.sum[idx] + grad * grad
        self.sum[idx] = state
        weight[idx] -= self.lr * grad / (np.sqrt(state) + self.eps)

    def state(self) -> dict[str, np.ndarray]:
        return {"sum": self.sum}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.sum[...] = state["sum"]


class SparseAdam:
    """torch.optim.SparseAdam on the rows a step touched: the moments of untouched rows stay as they are, and
    the bias correction counts every step (every rank steps together)."""

    def __init__(self, rows: int, dim: int, lr: float = 0.01, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.lr, self.betas, self.eps = lr, betas, eps
        self.m = np.zeros((rows, dim), dtype=np.float32)
        self.v = np.zeros((rows, dim), dtype=np.float32)
        self.steps = 0

    def update(self, weight: np.ndarray, idx: np.ndarray, grad: np.ndarray) -> None:
        b1, b2 = self.betas
        self.steps += 1
        m = self.m[idx] + (grad - self.m[idx]) * (1 - b1)
        v = self.v[idx] + (grad * grad - self.v[idx]) * (1 - b2)
        self.m[idx], self.v[idx] = m, v
        step_size = self.lr * math.sqrt(1 - b2 ** self.steps) / (1 - b1 ** self.steps)
        weight[idx] -= step_size * (m / (np.sqrt(v) + self.eps))

    def state(self) -> dict[str, np.ndarray]:
        return {"m": self.m, "v": self.v, "steps": np.array(self.steps)}

    def load(self, state: dict[str, np.ndarray]) -> None:
        self.m[...], self.v[...], self.steps = state["m"], state["v"], int(state["steps"])


OPTIMIZERS = {"adagrad": SparseAdagrad, "adam": SparseAdam}


class NodeEmbedding:
    """`dim` learnable numbers per node for the nodes [lo, lo + num_rows) this rank owns.

    With `comm`, `pull` and `step` are collective: every rank calls each once per batch, also with no ids.
    Gradients are averaged over the ranks as DDP averages dense ones, so a DDP-scaled loss trains rows alike.
    `optimizer`: "adagrad" (DistDGL's SparseAdagrad) or "adam" (SparseAdam). Rows start uniform in
    (-init_scale, init_scale), by `seed` and global id (`init_rows`).
    """

    def __init__(self, num_rows: int, dim: int, lo: int = 0, part_offsets: np.ndarray | None = None,
                 comm: Any = None, *, optimizer: str = "adagrad", lr: float = 0.01, seed: int = 0,
                 init_scale: float = 1.0) -> None:
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {optimizer!r}")
        self.lo, self.hi, self.dim = int(lo), int(lo) + int(num_rows), int(dim)
        self.comm = comm if comm is not None and comm.size > 1 else None
        self.part_offsets = None if part_offsets is None else np.asarray(part_offsets, dtype=np.int64)
        self.weight = init_rows(seed, self.lo, int(num_rows), self.dim, init_scale)
        self.optimizer = OPTIMIZERS[optimizer](int(num_rows), self.dim, lr=lr)
        self.bytes_received = 0  # rows pulled from other ranks
        self.bytes_sent = 0  # gradients pushed to other ranks
        self._pending: tuple | None = None

    def counters(self) -> dict[str, float]:
        """Rows pulled and gradients pushed so far (`run_epoch` diffs them)."""
        return {"embedding_bytes": self.bytes_received + self.bytes_sent}

    def pull(self, n_id: np.ndarray, device: Any = "cpu") -> Any:
        """Collective: the rows of `n_id` (global ids) as a float32 leaf tensor on `device` that keeps its
        gradient; call `step` after backward."""
        import torch

        n_id = np.asarray(n_id, dtype=np.int64)
        own = (n_id >= self.lo) & (n_id < self.hi)
        rows = np.empty((len(n_id), self.dim), dtype=np.float32)
        own_pos = np.flatnonzero(own)
        rows[own_pos] = self.weight[n_id[own_pos] - self.lo]
        route = None
        if self.comm is not None:
            remote_pos = np.flatnonzero(~own)
            _, order, counts = group_by_owner(n_id[remote_pos], self.part_offsets, self.comm.size)
            asked, asked_counts, pieces = MpiAlltoall(self.comm)(n_id[remote_pos][order], counts)
            got, _ = alltoallv(self.comm, self.weight[asked - self.lo], asked_counts, counts, pieces)
            rows[remote_pos[order]] = got
            self.bytes_received += got.nbytes
            route = (remote_pos[order], counts, asked, asked_counts, pieces)
        elif not own.all():
            raise ValueError("node ids outside this rank's rows and no communicator to fetch them")
        tensor = torch.from_numpy(rows).to(device).requires_grad_()
        self._pending = (n_id, own_pos, tensor, route)
        return tensor

    def step(self) -> None:
        """Collective: send the gradients of the last pull's rows to their owners and update the rows touched."""
        if self._pending is None:
            raise RuntimeError("NodeEmbedding.step() without a pull() before it")
        n_id, own_pos, tensor, route = self._pending
        self._pending = None
        grad = (np.zeros((len(n_id), self.dim), dtype=np.float32) if tensor.grad is None
                else tensor.grad.detach().float().cpu().numpy())
        idx, grad_all = n_id[own_pos] - self.lo, grad[own_pos]
        if route is not None:  # with a communicator
            sent_pos, counts, asked, asked_counts, pieces = route
            back, _ = alltoallv(self.comm, grad[sent_pos], counts, asked_counts, pieces)
            self.bytes_sent += grad[sent_pos].nbytes
            idx = np.concatenate([idx, asked - self.lo])
            grad_all = np.concatenate([grad_all, back]) / self.comm.size
        rows, inverse = np.unique(idx, return_inverse=True)
        summed = np.zeros((len(rows), self.dim), dtype=np.float32)
        np.add.at(summed, inverse, grad_all)
        self.optimizer.update(self.weight, rows, summed)

    def save(self, path: str, **tags: int) -> None:
        """This rank's rows and optimizer state to `path` (npz, durable, whole or not at all), with int `tags`.
        On an OSError (a full or failing disk) `path` is as it was."""
        arrays = {"weight": self.weight, "lo": np.array(self.lo), **self.optimizer.state(),
                  **{f"tag_{k}": np.array(v) for k, v in tags.items()}}
        write_durable(path, lambda f: np.savez(f, **arrays))

    def load(self, path: str) -> dict[str, int]:
        """Rows and optimizer state saved by `save` for the same rows (no pickles are read); returns the tags."""
        with np.load(path, allow_pickle=False) as saved:
            if int(saved["lo"]) != self.lo or saved["weight"].shape != self.weight.shape:
                raise ValueError(f"{path} holds rows from {int(saved['lo'])} of shape {saved['weight'].shape}; "
                                 f"this rank owns rows from {self.lo} of shape {self.weight.shape}. HINT: resume "
                                 "with the partition and --embed-dim the run was saved with")
            self.weight[...] = saved["weight"]
            self.optimizer.load({k: saved[k] for k in saved.files if k not in ("weight", "lo")})
            return {k[4:]: int(saved[k]) for k in saved.files if k.startswith("tag_")}
