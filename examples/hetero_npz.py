"""Train on your own heterogeneous graph: node and edge types as npz keys, then point mpignn at the file.

    python examples/hetero_npz.py --out papers.npz
    mpirun -np 2 python -m mpignn.train --dataset npz:papers.npz --embed-dim 16 --epochs 5

This script makes a small paper-author graph with numpy (stand-in for your data) and writes the keys mpignn
reads for a heterogeneous graph (docs/tasks.md, "Heterogeneous graphs (npz)"): one node count per type, features where a
type has them (authors have none: `--embed-dim` gives each author a learnable row), one edge list per
(source type, relation, target type) with ids local to their type, and the labels and splits of the type to
classify (papers, by topic).
"""
from __future__ import annotations

import argparse
import os

import numpy as np


def make_graph(num_papers: int, num_authors: int, topics: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    topic = rng.integers(0, topics, num_papers)
    author_topic = rng.integers(0, topics, num_authors)
    by_topic = [np.flatnonzero(author_topic == t) for t in range(topics)]
    # weak features: the topic is hard to read from a paper's own words
    x = (np.eye(topics)[topic] @ rng.normal(size=(topics, 32)) * 0.3
         + rng.normal(size=(num_papers, 32))).astype(np.float32)
    # three authors per paper, mostly of its topic; five citations, mostly of its topic
    paper = np.repeat(np.arange(num_papers), 3)
    author = np.array([rng.choice(by_topic[topic[p]]) if rng.random() < 0.8 else rng.integers(num_authors)
                       for p in paper])
    papers_of = [np.flatnonzero(topic == t) for t in range(topics)]
    citing = np.repeat(np.arange(num_papers), 5)
    cited = np.array([rng.choice(papers_of[topic[p]]) if rng.random() < 0.6 else rng.integers(num_papers)
                      for p in citing])
    order = rng.permutation(num_papers)
    cut1, cut2 = int(0.3 * num_papers), int(0.5 * num_papers)
    return {
        "num_nodes__paper": np.int64(num_papers), "num_nodes__author": np.int64(num_authors),
        "x__paper": x,  # no x__author: a featureless type
        # messages flow source -> target; give both directions where both ends should learn from each other
        "edge_index__author__writes__paper": np.stack([author, paper]),
        "edge_index__paper__written_by__author": np.stack([paper, author]),
        "edge_index__paper__cites__paper": np.stack([np.concatenate([citing, cited]),
                                                      np.concatenate([cited, citing])]),
        "y__paper": topic.astype(np.int64),
        "train_idx": np.sort(order[:cut1]), "val_idx": np.sort(order[cut1:cut2]), "test_idx": np.sort(order[cut2:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="papers.npz")
    parser.add_argument("--papers", type=int, default=6000)
    parser.add_argument("--authors", type=int, default=2000)
    args = parser.parse_args()
    tmp = f"{args.out}.tmp-{os.getpid()}.npz"
    np.savez(tmp, **make_graph(args.papers, args.authors))
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: train with  mpirun -np 2 python -m mpignn.train --dataset npz:{args.out} --embed-dim 16")


if __name__ == "__main__":
    main()
