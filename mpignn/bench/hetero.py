"""`python -m mpignn.bench.hetero`: heterogeneous training on 1 and N ranks, and what learnable rows buy.

IMDB: test accuracy at the best validation epoch per seed. `data.synthetic_hetero`'s user-item graph (signal
only in the featureless users): test accuracy with and without `--embed-dim`, and the rows' MiB per epoch.
"""
from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

from mpignn.bench._common import bench_parser, run_bench, run_train, table


def _best(records: list[dict]) -> dict:
    scored = [r for r in records if r.get("val_acc") is not None]
    return max(scored, key=lambda r: r["val_acc"])


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("mpignn.bench.hetero", __doc__, root=("data", "dataset root holding IMDB/raw"), ranks=2,
                          seeds="0,1,2", model=("sage", "sage or rgcn"), imdb_args="--fanout 10,5 --batch-size 128",
                          synthetic_args="--epochs 4 --fanout 10,5 --batch-size 256 --hidden 64 --lr 0.01",
                          embed_dim=32, skip=("", "imdb or synthetic: leave that table out"))
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.skip != "imdb":
        rows = []
        for n in (1, args.ranks):
            accs, config = [], f"{n} rank{'s' * (n > 1)}"
            for seed in seeds:
                recs = run_train(n, ["--dataset", "IMDB", "--root", args.root, "--model", args.model,
                                     "--seed", str(seed), *shlex.split(args.imdb_args)])
                best = _best(recs)
                accs.append(best["test_acc"])
                rows.append({"config": config, "seed": str(seed), "test": best["test_acc"], "val": best["val_acc"],
                             "epoch": best["epoch"], "epoch_s": recs[-1]["epoch_s"]})
            rows.append({"config": config, "seed": "mean", "test": sum(accs) / len(accs)})
        print(f"IMDB, --model {args.model} {args.imdb_args}")
        print(table(rows, [("config", "config", "s"), ("seed", "seed", "s"), ("test", "test acc", ".4f"),
                           ("val", "best val", ".4f"), ("epoch", "at epoch", "d"), ("epoch_s", "last epoch s", ".2f")]))
    if args.skip != "synthetic":
        from mpignn.data.npz import save_npz
        from mpignn.data.synthetic_hetero import make_user_item

        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "user-item.npz"
            save_npz(str(path), make_user_item())
            for n in (1, args.ranks):
                for dim in (0, args.embed_dim):
                    recs = run_train(n, ["--dataset", f"npz:{path}", "--root", tmp, "--model", args.model,
                                         "--embed-dim", str(dim), *shlex.split(args.synthetic_args)])
                    best = _best(recs)
                    rows.append({"config": f"{n} rank{'s' * (n > 1)}", "embed": dim, "test": best["test_acc"],
                                 "mib": recs[-1]["embedding_bytes"] / 2**20})
        print(f"\nuser-item (signal only in the featureless users), --model {args.model} {args.synthetic_args}")
        print(table(rows, [("config", "config", "s"), ("embed", "--embed-dim", "d"), ("test", "test acc", ".4f"),
                           ("mib", "rows MiB/epoch", ".2f")]))
    return 0


if __name__ == "__main__":
    run_bench(main)
