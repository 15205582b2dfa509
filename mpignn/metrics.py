"""Link prediction metrics, exact across ranks: AUC from all ranks' scores, MRR and Hits@K from summed ranks.

An average of per-rank AUCs is not the AUC of the union, so the scores themselves are gathered (one float
and one label per scored pair: small next to the features a batch moves). MRR and Hits@K are means over
positives, reduced as sums. numpy and mpi4py only.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["auc", "gather_scores", "positive_ranks", "LinkScores"]


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve: the chance that a random positive outscores a random negative (ties count
    half), by the Mann-Whitney rank sum. NaN when either class is absent."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels) > 0.5
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if not n_pos or not n_neg:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    ranks = np.empty(len(scores), dtype=np.float64)
    starts = np.flatnonzero(np.concatenate([[True], sorted_scores[1:] != sorted_scores[:-1]]))
    ends = np.concatenate([starts[1:], [len(scores)]])
    avg = (starts + ends + 1) / 2.0  # 1-based mean rank of each tie group
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def gather_scores(comm: Any, scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Collective over `comm`: every rank's (scores, labels), concatenated in rank order, on every rank."""
    from mpi4py import MPI

    local = np.stack([np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.float64)], axis=1)
    counts = np.array(comm.allgather(local.size), dtype=np.int64)
    out = np.empty(int(counts.sum()), dtype=np.float64)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
    comm.Allgatherv(local.reshape(-1), [out, (counts, displs), MPI.DOUBLE])
    both = out.reshape(-1, 2)
    return both[:, 0], both[:, 1]


def positive_ranks(pos: np.ndarray, tails: np.ndarray) -> np.ndarray:
    """Rank of each positive's score among its K negatives' (1 = best; a tie counts half, as OGB's
    optimistic and pessimistic ranks averaged)."""
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
        """One batch: positives and their fixed negatives (AUC), then K tails per positive (MRR, Hits@K)."""
        paired = 2 * num_pos
        self.scores.append(scores[:paired])
        self.labels.append(labels[:paired])
        if num_tails:
            self.ranks.append(positive_ranks(scores[:num_pos], scores[paired:].reshape(num_pos, num_tails)))

    def summary(self, comm: Any) -> dict[str, float]:
        """Collective over `comm`: {"auc", "mrr", "hits"} over every rank's pairs."""
        from mpignn.mpi import allreduce_sum

        cat = lambda parts: np.concatenate(parts) if parts else np.empty(0)  # noqa: E731
        scores, labels = gather_scores(comm, cat(self.scores), cat(self.labels))
        ranks = cat(self.ranks)
        n, rr, hits = allreduce_sum(comm, [len(ranks), (1.0 / ranks).sum(), (ranks <= self.hits_k).sum()])
        return {"auc": auc(scores, labels), "mrr": rr / n if n else float("nan"),
                "hits": hits / n if n else float("nan")}
