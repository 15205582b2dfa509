"""`python -m mpignn.bench`: does scaling out pay off for my graph?

Each row gets the cores its label says (1 x 1 pinned to one core, N ranks a core share each); the columns and
`--target-acc` are in docs/benchmarks.md. Use several `--seeds` for time to accuracy: where one run crosses a
target near its plateau is partly chance, so a single seed compares coin flips, not configurations.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import tempfile
from itertools import accumulate
from statistics import fmean as mean

from mpignn.bench._common import TEMP_ROOT, bench_parser, run_bench, run_train, save_plot, table
from mpignn.config.train_config import TrainConfig
from mpignn.training.record import repeatable


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("mpignn.bench", __doc__, dataset="synthetic", root=TEMP_ROOT, ranks=2,
                          epochs=(2, "the last epoch is reported"), fanout="15,10,5", batch_size=1024, hidden=256,
                          cache_size=(TrainConfig.cache_size,
                                      "cache rows of the +cache rows: auto (the training default) or a row count"),
                          precision="fp32", lr=0.003)
    parser.add_argument("--configs", default="1x1,1xall,metis+cache,metis,random+cache,random,replicated",
                        help="which of: 1x1, 1xall, metis+cache, metis, random+cache, random, replicated, "
                             "coop (--minibatch cooperative: each sampled row computed once), "
                             "auto (--minibatch auto: counted), tune (--minibatch tune: the modes timed on the first "
                             "steps), full or 1xall-full (--minibatch full: one step an epoch over the whole graph), "
                             "rank-batch (--batch-scope rank: --batch-size seeds per rank), rank-batch+sqrt-lr "
                             "or rank-batch+linear-lr (and --lr-scaling sqrt or linear); any of them + fp16 or "
                             "+ bf16 (--feature-dtype), e.g. metis+bf16")
    parser.add_argument("--plot", default="bench_split.png", help="PNG of the time split ('' for none)")
    parser.add_argument("--no-bind", action="store_true", help="leave core binding to the launcher's defaults")
    parser.add_argument("--target-acc", default="", help="time to this validation accuracy (a float, or auto)")
    parser.add_argument("--target-split", choices=("val", "test"), default="val",
                        help="the score --target-acc is for: val, or test (a published test accuracy)")
    parser.add_argument("--max-epochs", type=int, default=6, help="epoch limit per configuration with --target-acc")
    parser.add_argument("--evals-per-epoch", type=int, default=4,
                        help="with --target-acc: validation this many times per epoch (the time to accuracy "
                             "resolves to that fraction of an epoch)")
    parser.add_argument("--seeds", default="0",
                        help="with --target-acc: train each configuration once per seed (comma-separated); the "
                             "auto target and the times are means over the seeds")
    parser.add_argument("--task", default="node", help="the --task of mpignn.train; the table shows its "
                                                                  "throughput (seeds/s, edges/s) and its score")
    parser.add_argument("--max-steps", type=int, default=0,
                        help="training steps per epoch at most (0: all; e.g. for --task link on big graphs)")
    parser.add_argument("--launcher", default="",
                        help="start the rows' ranks with this command instead of mpiexec -n RANKS (it sets the "
                             "ranks), e.g. '../shared/tools/multihost-mpirun -H 2 -p 1 -r {rate} --'; {rate} "
                             "takes each of --rates in turn")
    parser.add_argument("--rates", default="", help="with a {rate} in --launcher: each configuration once per "
                                                    "value (comma-separated, e.g. 10gbit,1gbit,100mbit)")
    parser.add_argument("--train-args", default="", help="more mpignn.train flags for every row, as one string "
                                                          "(e.g. '--link-test 0.01 --link-tails 1')")
    args = parser.parse_args(argv)
    try:
        seeds = [int(v) for v in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds takes comma-separated integers, e.g. 0,1,2; got '{args.seeds}'")
    cores = len(os.sched_getaffinity(0))
    n = args.ranks
    cache = ["--cache-size", str(args.cache_size)]
    share = max(1, cores // n)  # cores per rank in the N-rank rows
    # name: (label, ranks, extra flags, cores per rank; 0 = unbound)
    known = {"1x1": ("1 rank x 1 thread", 1, ["--threads", "1"], 1),
             "1xall": (f"1 rank x {cores} threads", 1, ["--threads", str(cores)], 0),
             "metis+cache": (f"{n} ranks metis+cache", n, cache, share),
             "metis": (f"{n} ranks metis, no cache", n, ["--cache-size", "0"], share),
             "random+cache": (f"{n} ranks random+cache", n, ["--partition-method", "random", *cache], share),
             "random": (f"{n} ranks random, no cache", n, ["--partition-method", "random", "--cache-size", "0"],
                        share),
             "replicated": (f"{n} ranks replicated", n, ["--replicated"], share),
             "coop": (f"{n} ranks metis, cooperative", n, ["--minibatch", "cooperative", *cache], share),
             "auto": (f"{n} ranks metis+cache, --minibatch auto", n, ["--minibatch", "auto", *cache], share),
             "tune": (f"{n} ranks metis+cache, --minibatch tune", n, ["--minibatch", "tune", *cache], share),
             "full": (f"{n} ranks, full-graph", n, ["--minibatch", "full"], share),
             "1xall-full": (f"1 rank x {cores} threads, full-graph", 1, ["--minibatch", "full", "--threads",
                                                                         str(cores)], 0),
             "rank-batch": (f"{n} ranks metis+cache, batch per rank", n, [*cache, "--batch-scope", "rank"], share),
             **{f"rank-batch+{rule}-lr": (f"{n} ranks metis+cache, batch per rank, {rule} lr", n,
                                          [*cache, "--batch-scope", "rank", "--lr-scaling", rule], share)
                for rule in ("sqrt", "linear")}}
    configs = []
    for name in args.configs.split(","):
        # +labor: LABOR-0; +laborI: I importance iterations
        base, dtype, labor = re.fullmatch(r"(.*?)(?:\+(fp16|bf16))?(?:\+labor(\d*))?", name).groups()
        if base not in known:
            parser.error(f"--configs: unknown '{name}'; choose from {', '.join(known)} (each may end in +fp16 or "
                         "+bf16, then +labor or +laborI, I the --labor-iterations)")
        label, ranks, extra, bind = known[base]
        if dtype:
            label, extra = f"{label}, {dtype} features", [*extra, "--feature-dtype", dtype]
        if labor in ("", "0"):
            label, extra = f"{label}, labor", [*extra, "--sampler", "labor"]
        elif labor:
            label, extra = f"{label}, labor-{labor}", [*extra, "--sampler", "labor", "--labor-iterations", labor]
        configs.append((label, ranks, extra, bind))
    rates = [r for r in args.rates.split(",") if r]
    if ("{rate}" in args.launcher) != bool(rates):
        parser.error("--rates and a {rate} in --launcher go together, e.g. --launcher "
                     "'multihost-mpirun -H 2 -p 1 -r {rate} --' --rates 10gbit,1gbit,100mbit")
    if args.launcher and any(ranks == 1 for _, ranks, _, _ in configs):
        parser.error("--launcher starts every row's ranks: leave the 1-rank configurations (1x1, 1xall, "
                     "1xall-full) out of --configs")
    timing = bool(args.target_acc)
    rows, curves = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp

        def train(ranks: int, extra: list[str], bind: int, epochs: int, evals: list[str], seed: int,
                  rate: str = "") -> list[dict]:
            # independent unless a configuration says otherwise (its flags come later and win)
            common = ["--minibatch", "independent", "--dataset", args.dataset, "--root", root, "--seed", str(seed),
                      "--epochs", str(epochs),
                      "--fanout", args.fanout, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
                      "--precision", args.precision, "--lr", str(args.lr), "--task", args.task,
                      "--max-steps", str(args.max_steps), *shlex.split(args.train_args), *evals]
            launcher = shlex.split(args.launcher.replace("{rate}", rate)) if args.launcher else None
            return run_train(ranks, [*common, *extra], cores_per_rank=0 if args.no_bind else bind, launcher=launcher)

        evals = ["--eval-every", str(args.epochs + 1)]
        if timing:
            target = args.target_acc
            if target == "auto":  # calibration: the first configuration's validation accuracy after 2 epochs
                _, ranks, extra, bind = configs[0]
                accs = [_by_role(train(ranks, extra, bind, 2, ["--eval-every", "2"], seed)[-1])[args.target_split]
                        for seed in seeds]
                target = str(mean(accs))
                print(f"  target: {float(target):.4f} ({args.target_split} accuracy of {configs[0][0]} after 2 epochs"
                      + (f", mean of seeds {args.seeds})" if len(seeds) > 1 else ")"), flush=True)
            evals = ["--eval-every", "1", "--evals-per-epoch", str(args.evals_per_epoch),
                     f"--target-{args.target_split}", target]
        for name, ranks, extra, bind in configs:
            first = None  # the records at the first rate, which the slower links must repeat
            for rate in rates or [""]:
                runs = [train(ranks, extra, bind, args.max_epochs if timing else args.epochs, evals, seed, rate)
                        for seed in (seeds if timing else seeds[:1])]
                kept = [repeatable(rec) for rec in runs[0]]
                first = first or kept
                label = f"{name} @ {rate}" if rate else name
                rows.append({"config": name, "link": rate, "same": "yes" if kept == first else "NO",
                             **_by_role(runs[0][-1])})
                curves.append((label, runs))
                print(f"  done: {label}", flush=True)
    if timing:
        return _time_to_accuracy(args, curves, float(target))
    base = rows[0]["per_s"]
    for row in rows:
        row["speedup"] = row["per_s"] / base
        row["remote_mib"] = (row["remote_feature_bytes"] + row["remote_structure_bytes"]) / 2**20
        row["feat_mib"] = row["remote_feature_bytes"] / 2**20
        row["halo_mib"] = row.get("halo_step_bytes", 0) / 2**20
        row["input_rows"] = (row.get("rows_per_step") or [None])[0]
    unit = rows[0]["unit"]
    print(f"{args.dataset}: {args.task} task, fanout {args.fanout}, batch {args.batch_size}, hidden {args.hidden}, "
          f"{args.precision}, epoch {args.epochs - 1} of {args.epochs}")
    links = [("link", "link", "s"), ("same", "records = first link's", "s")] if rates else []
    print(table(rows, [("config", "config", "s"), *links, ("minibatch", "trained as", "s"),
                       ("epoch_s", "epoch s", ".2f"), ("per_s", unit, ".0f"), ("speedup", "x first row", ".2f"),
                       ("sample_s", "sample", ".2f"), ("exchange_s", "exchange", ".2f"),
                       ("compute_s", "compute", ".2f"), ("allreduce_s", "allreduce", ".2f"), ("wait_s", "wait", ".2f"),
                       ("nodes_per_step", "nodes/step", ".0f"), ("input_rows", "input rows/step", ".0f"),
                       ("feat_mib", "feat MiB", ".1f"), ("remote_mib", "remote MiB", ".1f"),
                       ("cache_hit_rate", "cache hit", ".2f"), ("recent_hit_rate", "recent", ".2f"),
                       ("redundancy", "redundancy", ".2f"), ("halo_mib", "rows MiB/step", ".2f"),
                       ("peak_rss_mb", "peak MiB", ".0f"), ("test", "test score", ".4f")]))
    if args.plot:
        save_plot(args.plot, (9, 0.6 * len(rows) + 1.5), lambda ax: _plot(ax, rows))
    return 0


def _scored(recs: list[dict], split: str) -> list[tuple[float, dict]]:
    """(training seconds by its end, record) of each record with a `split` score."""
    return [(t, rec) for t, rec in zip(accumulate(r["epoch_s"] for r in recs), recs) if rec[split] is not None]


def _reach(recs: list[dict], target: float, split: str = "val") -> dict | None:
    for elapsed, rec in _scored(recs, split):
        if rec[split] >= target:
            return {"seconds": elapsed, "epochs": rec["epochs_done"], "val": rec["val"], "test": rec["test"]}
    return None


def _by_role(rec: dict) -> dict:
    rate = next(k for k in rec if k.endswith("_per_s"))
    metric = next(k for k in rec if k.startswith("val_"))[len("val_"):]
    rec.update(per_s=rec[rate], unit=rate[:-len("_per_s")] + "/s", metric=metric, val=rec[f"val_{metric}"],
               test=rec.get(f"test_{metric}"))
    return rec


def _time_to_accuracy(args: argparse.Namespace, curves: list[tuple[str, list[list[dict]]]], target: float) -> int:
    curves = [(name, [[_by_role(rec) for rec in recs] for recs in runs]) for name, runs in curves]
    rows, several = [], len(curves[0][1]) > 1
    last = curves[0][1][0][-1]
    metric = {"acc": "accuracy"}.get(last["metric"], last["metric"].upper())
    for name, runs in curves:
        hits = [_reach(recs, target, args.target_split) for recs in runs]
        got = [h for h in hits if h is not None]
        row = {"config": name, "reached": "yes" if len(got) == len(runs) else f"{len(got)}/{len(runs)}" if got
               else "no", "per_seed": "/".join(f"{h['seconds']:.2f}" if h else "-" for h in hits),
               "per_s": mean([recs[-1]["per_s"] for recs in runs]),
               "minibatch": "/".join(sorted({recs[-1].get("minibatch", "-") for recs in runs})),
               "feat_mib": mean([recs[-1].get("remote_feature_bytes", 0) for recs in runs]) / 2**20}
        if len(got) == len(runs):  # a mean over the runs that made it would flatter a configuration
            row.update({key: mean([h[key] for h in got]) for key in ("seconds", "epochs", "val", "test")})
        rows.append(row)
    base = rows[0].get("seconds")
    for row in rows:
        row["vs_first"] = row["seconds"] / base if base and "seconds" in row else None
    print(f"{args.dataset}: fanout {args.fanout}, batch {args.batch_size}, hidden {args.hidden}, lr {args.lr}, "
          f"{args.precision}; time to {_SPLITS[args.target_split]} {metric} {target:.4f} (up to {args.max_epochs} "
          "epochs" + (f"; means over {len(curves[0][1])} seeds)" if several else ")"))
    columns = [("config", "config", "s"), ("reached", "reached", "s"), ("seconds", "train s", ".2f"),
               ("epochs", "epochs", ".2f"), ("val", f"val {last['metric']}", ".4f"),
               ("test", f"test {last['metric']}", ".4f"), ("vs_first", "time / first", ".2f"),
               ("per_s", last["unit"], ".0f"), ("feat_mib", "feat MiB/epoch", ".1f"), ("minibatch", "trained as", "s")]
    if several:
        columns.append(("per_seed", "train s per seed", "s"))
    print(table(rows, columns))
    if args.plot:
        save_plot(args.plot, (8, 5), lambda ax: _plot_curves(ax, curves, target, args.target_split))
    return 0


_SPLITS = {"val": "validation", "test": "test"}


def _plot_curves(ax, curves: list[tuple[str, list[list[dict]]]], target: float, split: str = "val") -> None:
    for k, (name, runs) in enumerate(curves):
        for i, recs in enumerate(runs):  # one colour per configuration, one line per seed
            points = _scored(recs, split)
            ax.plot([t for t, _ in points], [rec[split] for _, rec in points], marker="o", color=f"C{k}",
                    label=name if i == 0 else None)
    ax.axhline(target, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("training seconds (slowest rank, evaluation excluded)")
    ax.set_ylabel(f"{_SPLITS[split]} accuracy")


def _plot(ax, rows: list[dict]) -> None:
    left = [0.0] * len(rows)
    for part in ("sample_s", "exchange_s", "compute_s", "allreduce_s"):
        values = [r[part] for r in rows]
        ax.barh([f"{r['config']} {r['link']}".rstrip() for r in rows], values, left=left, label=part[:-2])
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds per epoch (slowest rank)")


if __name__ == "__main__":
    run_bench(main)
