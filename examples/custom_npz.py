"""Train on your own graph: write it as one .npz file, then point mpignn at it.

    python examples/custom_npz.py --out my_graph.npz
    mpirun -np 2 python -m mpignn.train --dataset npz:my_graph.npz --epochs 5

This script makes a small two-moons-like graph with numpy (stand-in for your data) and writes the keys
mpignn reads: edge_index, x, y, train_idx, val_idx, test_idx (see docs/datasets.md, "Your own graph (npz)").
"""
from __future__ import annotations

import argparse
import os

import numpy as np


def make_graph(num_nodes: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=num_nodes)
    x = (np.eye(3)[y] @ rng.normal(size=(3, 16)) + rng.normal(scale=2.0, size=(num_nodes, 16))).astype(np.float32)
    # mostly same-label neighbours: each node links to 6 random nodes of its label and 1 of any label
    by_label = [np.flatnonzero(y == c) for c in range(3)]
    src = np.repeat(np.arange(num_nodes), 7)
    dst = np.concatenate([np.append(rng.choice(by_label[y[v]], 6), rng.integers(num_nodes)) for v in range(num_nodes)])
    keep = src != dst
    edge_index = np.stack([np.concatenate([src[keep], dst[keep]]), np.concatenate([dst[keep], src[keep]])])
    order = rng.permutation(num_nodes)
    cut1, cut2 = int(0.5 * num_nodes), int(0.7 * num_nodes)
    return {"edge_index": edge_index.astype(np.int64), "x": x, "y": y.astype(np.int64),
            "train_idx": np.sort(order[:cut1]), "val_idx": np.sort(order[cut1:cut2]),
            "test_idx": np.sort(order[cut2:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="my_graph.npz")
    parser.add_argument("--nodes", type=int, default=5000)
    args = parser.parse_args()
    tmp = f"{args.out}.tmp-{os.getpid()}.npz"
    np.savez(tmp, **make_graph(args.nodes))
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: train with  mpirun -np 2 python -m mpignn.train --dataset npz:{args.out}")


if __name__ == "__main__":
    main()
