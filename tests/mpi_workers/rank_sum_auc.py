"""The single-process reference AUC that `mpignn.tasks.link_metrics.global_auc` must equal exactly (used by
tests/test_links.py and mpi_workers/link_metrics.py)."""
import numpy as np


def auc(scores, labels):
    """The ROC AUC by the Mann-Whitney rank sum (ties count half); NaN when a class is absent: the reference
    that `global_auc` must equal exactly."""
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
