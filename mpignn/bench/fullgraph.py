"""`python -m mpignn.bench.fullgraph`: a `--minibatch full` epoch against PyG's full-batch GraphSAGE.

Same layers, width, dropout and learning rate on both sides; PyG computes every node in every layer, mpignn only
the training nodes' L-hop neighbourhood. Epoch seconds are medians after the first epoch (which builds the
batch); evaluation is not timed.
"""
from __future__ import annotations

import os
import tempfile
import time
from statistics import median

from mpignn.bench._common import TEMP_ROOT, bench_parser, run_bench, run_train, table


def pyg_full_batch(dataset: str, root: str, splits: str, layers: int, hidden: int, dropout: float, lr: float,
                   epochs: int, threads: int) -> list[float]:
    """Return the seconds of each epoch of PyG's classic full-batch GraphSAGE script, in this process."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_geometric.nn import SAGEConv

    from mpignn.data import load_dataset

    torch.set_num_threads(threads)
    graph = load_dataset(dataset, root, splits=splits)
    x, y = torch.from_numpy(graph.x).float(), torch.from_numpy(graph.y)
    edge_index = torch.from_numpy(graph.edge_index())
    train = torch.from_numpy(np.asarray(graph.train_idx, dtype=np.int64))
    widths = [x.shape[1]] + [hidden] * (layers - 1) + [graph.num_classes]
    torch.manual_seed(0)
    convs = torch.nn.ModuleList(SAGEConv(a, b) for a, b in zip(widths[:-1], widths[1:]))
    optimizer = torch.optim.Adam(convs.parameters(), lr=lr)
    seconds = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        h = x
        for i, conv in enumerate(convs):
            h = conv(h, edge_index)
            if i < layers - 1:
                h = F.dropout(h.relu(), p=dropout, training=True)
        F.cross_entropy(h[train], y[train]).backward()
        optimizer.step()
        seconds.append(time.perf_counter() - t0)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("mpignn.bench.fullgraph", __doc__, dataset="Coauthor-CS", root=TEMP_ROOT,
                          splits=("", "--splits file of mpignn.train (fixed train/valid/test ids)"), ranks=2,
                          layers=2, hidden=256, dropout=0.5, lr=0.01,
                          epochs=(6, "epochs per configuration; the first is not timed"))
    parser.add_argument("--no-pyg", action="store_true", help="skip PyG's full-batch row")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the mpignn rows this many times, one after another in turn; each row's median "
                             "over the rounds, and each round's N ranks against 1 x 1 (a noisy machine's spread)")
    args = parser.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp
        common = ["--dataset", args.dataset, "--root", root, "--minibatch", "full", "--hidden", str(args.hidden),
                  "--fanout=" + ",".join(["-1"] * args.layers), "--dropout", str(args.dropout), "--lr", str(args.lr),
                  "--epochs", str(args.epochs), "--eval-every", str(args.epochs + 1), "--precision", "fp32",
                  *(["--splits", args.splits] if args.splits else [])]
        runs = [(f"mpignn full, 1 rank x {cores} threads", 1, ["--threads", str(cores)], 0),
                ("mpignn full, 1 rank x 1 thread", 1, ["--threads", "1"], 1),
                (f"mpignn full, {args.ranks} ranks x {max(1, cores // args.ranks)} thread(s)", args.ranks, [],
                 max(1, cores // args.ranks))]
        seconds: dict[str, list[float]] = {label: [] for label, *_ in runs}
        for round_ in range(max(1, args.rounds)):
            for label, ranks, extra, bind in runs:
                recs = run_train(ranks, [*common, *extra], cores_per_rank=bind)
                seconds[label].append(median(r["epoch_s"] for r in recs[1:]))
                if not round_:
                    rows.append({"config": label, "halo": recs[-1].get("halo_step_bytes", 0) / 2**20,
                                 "rows": recs[-1]["rows_per_step"][0]})
                print(f"  done: {label}" + (f", round {round_ + 1}" if args.rounds > 1 else ""), flush=True)
        for row in rows:
            row["epoch_s"] = median(seconds[row["config"]])
        each = [one / many for one, many in zip(seconds[runs[1][0]], seconds[runs[2][0]])]  # 1 x 1 against N ranks
        if not args.no_pyg:
            pyg = pyg_full_batch(args.dataset, root, args.splits, args.layers, args.hidden, args.dropout, args.lr,
                                 args.epochs, cores)
            rows.append({"config": f"PyG full-batch GraphSAGE, {cores} threads", "epoch_s": median(pyg[1:])})
    base = rows[-1]["epoch_s"] if not args.no_pyg else rows[0]["epoch_s"]
    one = rows[1]["epoch_s"]  # 1 rank x 1 thread: what N ranks of one core share each scale from
    for row in rows:
        row["per_s"] = 1 / row["epoch_s"]
        row["vs"] = base / row["epoch_s"]
        row["vs_one"] = one / row["epoch_s"]
    print(f"{args.dataset}: {args.layers} layers, hidden {args.hidden}, dropout {args.dropout}, fp32; median epoch "
          f"of epochs 2-{args.epochs}")
    print(table(rows, [("config", "config", "s"), ("epoch_s", "epoch s", ".3f"), ("per_s", "epochs/s", ".2f"),
                       ("vs", "x PyG" if not args.no_pyg else "x first", ".2f"), ("vs_one", "x 1x1", ".2f"),
                       ("rows", "input rows/step", ".0f"), ("halo", "halo MiB/epoch", ".1f")]))
    if len(each) > 1:
        print(f"{args.ranks} ranks against 1 x 1, each round: {', '.join(f'{r:.2f}x' for r in each)} "
              f"(median {median(each):.2f}x)")
    return 0


if __name__ == "__main__":
    run_bench(main)
