"""A heterogeneous graph whose signal lives only in a featureless node type, to check learnable embeddings.

Items (the classified type) carry noise features; featureless users hold the class through their community.
Without learnable user rows a model can only guess; with them, training items teach their users' rows the
community and held-out items are classified by it. numpy only.

    python -m mpignn.data.synthetic_hetero --out graph.npz   # then --dataset npz:graph.npz --embed-dim 32
"""
from __future__ import annotations

import argparse

import numpy as np

from mpignn.data.graph import GraphData
from mpignn.data.hetero import build_hetero
from mpignn.data.npz import save_npz

__all__ = ["make_user_item"]


def make_user_item(num_items: int = 6000, num_users: int = 1500, num_classes: int = 4, edges_per_item: int = 8,
                   affinity: float = 0.8, num_features: int = 16, seed: int = 0) -> GraphData:
    """Items -> users ("rates") and back; `affinity` of an item's edges go to its class's community."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, num_items)
    community = rng.integers(0, num_classes, num_users)
    members = [np.flatnonzero(community == c) for c in range(num_classes)]
    item = np.repeat(np.arange(num_items), edges_per_item)
    own = rng.random(len(item)) < affinity
    user = rng.integers(0, num_users, len(item))
    for c in range(num_classes):
        pick = own & (y[item] == c)
        user[pick] = members[c][rng.integers(0, len(members[c]), int(pick.sum()))]
    perm = rng.permutation(num_items)
    a, b = num_items // 2, num_items * 7 // 10
    return build_hetero(
        "user-item", {"item": num_items, "user": num_users},
        {("item", "rates", "user"): np.stack([item, user]), ("user", "rated_by", "item"): np.stack([user, item])},
        {"item": rng.standard_normal((num_items, num_features)).astype(np.float32)}, "item", y,
        {"train_idx": np.sort(perm[:a]), "val_idx": np.sort(perm[a:b]), "test_idx": np.sort(perm[b:])},
        num_classes)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mpignn.data.synthetic_hetero", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--items", type=int, default=6000)
    parser.add_argument("--users", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    save_npz(args.out, make_user_item(args.items, args.users, seed=args.seed))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
