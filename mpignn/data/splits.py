"""Checks on train/val/test id arrays shared by the npz and npy readers, so both say the same thing."""
from __future__ import annotations

import numpy as np

__all__ = ["PURPOSE", "split_problem"]

PURPOSE = {"train_idx": "nothing to train on", "val_idx": "nothing to select the model on",
           "test_idx": "nothing to report the accuracy on"}
PURPOSE.update(train=PURPOSE["train_idx"], valid=PURPOSE["val_idx"], test=PURPOSE["test_idx"])  # --splits' keys


def split_problem(splits: dict[str, np.ndarray], n: int) -> tuple[str, str] | None:
    """The first problem (what, hint) of the splits, or None when they are sound."""
    owner = np.zeros(n, dtype=np.int8)
    for i, (key, idx) in enumerate(splits.items(), start=1):
        if idx.size == 0:
            return (f"{key} is empty ({PURPOSE.get(key, 'no nodes')}); all three splits need nodes",
                    "hold out some labelled nodes, e.g. split a random permutation 60/20/20")
        if idx.min() < 0 or idx.max() >= n:
            return (f"{key} has node ids outside [0, {n}): min {idx.min()}, max {idx.max()}",
                    "node ids are row numbers of x, 0 .. N-1")
        ordered = np.sort(idx)
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if repeated.size:
            return (f"{key} must list each node once; got {repeated.size} repeated id(s), e.g. {repeated[0]}",
                    f"save np.unique({key})")
        taken = owner[idx]
        if taken.any():
            other = list(splits)[int(taken[taken > 0][0]) - 1]
            shared = idx[taken > 0]
            return (f"{other} and {key} share {shared.size} node(s), e.g. {shared[0]}; a node may be in one split "
                    "only", f"remove them from one split, e.g. np.setdiff1d({key}, {other})")
        owner[idx] = i
    return None
