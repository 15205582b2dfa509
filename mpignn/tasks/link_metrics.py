"""Link prediction metrics, exact across ranks. An average of per-rank AUCs is not the union's, and gathering
every score would not fit: so the Mann-Whitney U over sorted negatives passed round a ring in bounded chunks.
MRR and Hits@K reduce as sums. numpy and mpi4py only.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mpignn.mpi import allreduce_sum
from mpignn.mpi.watchdog import bounded

__all__ = ["AUC_CHUNK", "global_auc", "positive_ranks", "LinkScores"]

AUC_CHUNK = 1 << 18
"""Negatives per message of `global_auc` (2 MiB): what a rank holds of another rank's scores at a time."""
_AUC_TAG = 2511


def global_auc(comm: Any, scores: np.ndarray, labels: np.ndarray, chunk: int = AUC_CHUNK) -> float:
    """Collective over `comm`: every rank must call it, in the same order. Return the ROC AUC of all ranks' scores
    together, exactly (U / (positives x negatives); NaN without either class), holding one chunk of another
    rank's at a time."""
    from mpi4py import MPI

    scores = np.asarray(scores, dtype=np.float64)
    is_pos = np.asarray(labels) > 0.5
    pos, neg = scores[is_pos], scores[~is_pos]
    neg.sort()  # in place: a copy already
    with bounded("global_auc (ring of sorted negatives)"):
        counts = [int(c) for c in comm.allgather(len(neg))]
        twice_u = _twice_wins(pos, neg)
        size = len(counts)
        rank = comm.Get_rank() if size > 1 else 0
        buf = np.empty(min(chunk, max(counts)), dtype=np.float64)
        for step in range(1, size):
            dest, src = (rank + step) % size, (rank - step) % size
            sends, recvs = range(0, len(neg), chunk), range(0, counts[src], chunk)
            for i in range(max(len(sends), len(recvs))):
                req = None
                if i < len(sends):
                    req = comm.Isend([neg[sends[i]:sends[i] + chunk], MPI.DOUBLE], dest, _AUC_TAG)
                if i < len(recvs):
                    got = buf[:min(chunk, counts[src] - recvs[i])]
                    comm.Recv([got, MPI.DOUBLE], src, _AUC_TAG)
                    twice_u += _twice_wins(pos, got)
                if req is not None:
                    req.Wait()
        total = np.empty(3, dtype=np.int64)
        comm.Allreduce(np.array([twice_u, len(pos), len(neg)], dtype=np.int64), total, op=MPI.SUM)
    twice_u, n_pos, n_neg = (int(v) for v in total)
    if not n_pos or not n_neg:
        return float("nan")
    return twice_u / (2 * n_pos * n_neg)  # exact integers, one rounding: the same float as a rank sum


def _twice_wins(pos: np.ndarray, sorted_neg: np.ndarray) -> int:
    """Twice the wins (ties half), so sums stay exact integers."""
    below = int(np.searchsorted(sorted_neg, pos, side="left").sum())
    return below + int(np.searchsorted(sorted_neg, pos, side="right").sum())


def positive_ranks(pos: np.ndarray, tails: np.ndarray) -> np.ndarray:
    """Return each positive's rank among its K negatives (1 = best; ties half, as OGB's ranks averaged)."""
    pos = np.asarray(pos, dtype=np.float64)[:, None]
    tails = np.asarray(tails, dtype=np.float64)
    return 1.0 + (tails > pos).sum(1) + 0.5 * (tails == pos).sum(1)


class LinkScores:
    """Collects one rank's scores over an evaluation pass; `summary` reduces them over `comm`."""

    def __init__(self, hits_k: int = 10) -> None:
        self.hits_k = hits_k
        self.scores: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []
        self.ranks: list[np.ndarray] = []

    def add(self, scores: np.ndarray, labels: np.ndarray, num_pos: int, num_tails: int) -> None:
        """Add one batch: positives and fixed negatives (AUC), then K tails per positive (MRR, Hits@K)."""
        paired = 2 * num_pos
        self.scores.append(scores[:paired])
        self.labels.append(labels[:paired])
        if num_tails:
            self.ranks.append(positive_ranks(scores[:num_pos], scores[paired:].reshape(num_pos, num_tails)))

    def summary(self, comm: Any) -> dict[str, float]:
        """Collective over `comm`: return {"auc", "mrr", "hits"} over every rank's pairs."""
        cat = lambda parts: np.concatenate(parts) if parts else np.empty(0)  # noqa: E731
        area = global_auc(comm, cat(self.scores), cat(self.labels))
        ranks = cat(self.ranks)
        n, rr, hits = allreduce_sum(comm, [len(ranks), (1.0 / ranks).sum(), (ranks <= self.hits_k).sum()])
        return {"auc": area, "mrr": rr / n if n else float("nan"),
                "hits": hits / n if n else float("nan")}
