"""`python -m mpignn.bench.predict`: exact layer-wise inference (`python -m mpignn.predict`) of one trained
model per RANKSxTHREADS configuration, optionally beside PyG's on the same weights (docs/benchmarks.md).
Without --checkpoint the model trains one step only: inference costs the same whatever the weights.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from mpignn.bench._common import (TEMP_ROOT, bench_parser, mpi_command, pyg_python, run_bench, run_reference,
                                  run_train, table)
from mpignn.predict import load, read_manifest

_LAYERS = re.compile(r"(\d+) layers over (\d+) blocks per rank in ([\d.]+)s, (\d+) row exchanges, ([\d.]+) MiB of rows "
                     r"fetched")
_PEAK = re.compile(r"peak memory (\d+) MiB")


def predict_args(threads: int, checkpoint: Path, out: Path, chunk: int, halo_mib: str = "") -> list[str]:
    """Return the `python -m mpignn.predict` flags of one row (`halo_mib` "": the default)."""
    return ["--checkpoint-dir", str(checkpoint), "--out", str(out), "--threads", str(threads), "--chunk-size",
            str(chunk), "--force", "--logits", *(["--halo-mib", halo_mib] if halo_mib else [])]


def read_row(log: str, ok: bool, what: str) -> dict:
    """Return a row's figures parsed from its ranks' log (`ok`: every rank ended 0)."""
    layers, peak = _LAYERS.search(log), _PEAK.search(log)
    if not ok or layers is None or peak is None:
        raise RuntimeError(f"{what} failed:\n{log[-3000:]}")
    return {"layers_s": float(layers.group(3)), "exchanges": int(layers.group(4)),
            "fetched_mib": float(layers.group(5)), "peak_mib": float(peak.group(1))}


def predict(ranks: int, threads: int, checkpoint: Path, out: Path, chunk: int, halo_mib: str = "") -> dict:
    """Run `mpiexec -n ranks python -m mpignn.predict`, each rank bound to `threads` cores; return its row."""
    start, pin = mpi_command(ranks, threads)
    cmd = [*start, "mpignn.predict", *predict_args(threads, checkpoint, out, chunk, halo_mib)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env, preexec_fn=pin)
    return read_row(res.stdout + res.stderr, res.returncode == 0, " ".join(cmd))


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("mpignn.bench.predict", __doc__,
                          dataset="synthetic:num_nodes=200000,avg_degree=20,num_features=100", model="sage",
                          hidden=256, layers=3, root=TEMP_ROOT, chunk_size=8192)
    parser.add_argument("--configs", default="1x2,1x1,2x1",
                        help="RANKSxTHREADS[@MIB], comma-separated (@MIB: that --halo-mib, e.g. 2x1@0 fetches "
                             "each block's halo rows on its own)")
    parser.add_argument("--checkpoint", default="",
                        help="predict this --checkpoint-dir of mpignn.train instead of training one (its dataset, "
                             "partition and model; --dataset, --model, --hidden and --layers are then unused)")
    parser.add_argument("--pyg-python", help="interpreter with torch-geometric + pyg-lib or torch-sparse: adds "
                                             "a row of PyG's layer-wise inference of the same weights")
    parser.add_argument("--pyg-batch-size", type=int, default=4096, help="the PyG row's NeighborLoader batch")
    args = parser.parse_args(argv)
    if args.checkpoint:  # what the table's title and the PyG row need, from the run's saved config
        from mpignn.training.checkpoint import checkpoint_config

        cfg = checkpoint_config(args.checkpoint)
        args.dataset, args.model, args.hidden = cfg["dataset"], cfg["model"], cfg["hidden"]
        args.layers = len(str(cfg["fanout"]).split(","))
    configs = []
    for c in args.configs.split(","):
        shape, _, mib = c.partition("@")
        configs.append((*(int(v) for v in shape.split("x")), mib))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root, checkpoint = args.root or tmp, Path(args.checkpoint or Path(tmp) / "ck")
        for ranks, threads, mib in configs:  # the first config's rank count trains the weights once
            if not checkpoint.exists():
                run_train(ranks, ["--dataset", args.dataset, "--root", root, "--model", args.model, "--hidden",
                                  str(args.hidden), "--fanout", ",".join(["5"] * args.layers), "--epochs", "1",
                                  "--max-steps", "1", "--minibatch", "independent",  # as measured
                                  "--checkpoint-dir", str(checkpoint)])
            where = Path(tmp) / f"out-{ranks}x{threads}@{mib}"
            row = predict(ranks, threads, checkpoint, where, args.chunk_size, mib)
            num_nodes = int(read_manifest(where)["num_nodes"])
            name = (f"{ranks} rank{'s' if ranks > 1 else ''} x {threads} thread{'s' if threads > 1 else ''}"
                    + (f", --halo-mib {mib}" if mib else ""))
            row.update(config=name, nodes_per_s=num_nodes / max(row["layers_s"], 1e-4),  # the log's resolution
                       out=where)
            rows.append(row)
            print(f"  done: {row['config']}", flush=True)
        ref = pyg_python(args.pyg_python)
        if ref and args.model == "sage":  # same weights, same machine, one process x the first config's threads
            pyg = _pyg_row(ref, args, checkpoint, Path(tmp), configs[0][1])
            want = pyg.pop("logits")
            for row in rows:  # the same outputs: every row's logits against PyG's, in the dataset's order
                row["max_diff"] = float(np.abs(np.asarray(load(row["out"])["logits"]) - want).max())
            rows.insert(0, pyg)
        elif args.pyg_python:
            print(f"  PyG row skipped: --model {args.model} (the reference runs sage)", flush=True)
    base = rows[0]["nodes_per_s"]
    for row in rows:
        row["vs_first"] = row["nodes_per_s"] / base
    print(f"{args.dataset}: exact inference, {args.model} {args.layers} layers hidden {args.hidden}, "
          f"{num_nodes} nodes, chunks of {args.chunk_size} targets")
    print(table(rows, [("config", "config", "s"), ("layers_s", "layers s", ".2f"), ("nodes_per_s", "nodes/s", ".0f"),
                       ("vs_first", "x first", ".2f"), ("exchanges", "row exchanges", "d"),
                       ("fetched_mib", "fetched MiB", ".1f"),
                       ("peak_mib", "peak MiB (max rank)", ".0f"), ("max_diff", "max |logit diff|", ".1e")]))
    if rows[0].get("max_diff") is not None:
        print("max |logit diff|: against the PyG row's logits, node by node in the dataset's order")
    return 0


def _pyg_row(python: str, args: argparse.Namespace, checkpoint: Path, tmp: Path, threads: int) -> dict:
    from mpignn.training.checkpoint import latest_checkpoint

    out = tmp / "pyg-logits.npy"
    got = run_reference(python, "infer", "--dataset", args.dataset, "--checkpoint",
                        str(latest_checkpoint(str(checkpoint)) / "checkpoint.pt"), "--hidden", str(args.hidden),
                        "--layers", str(args.layers), "--batch-size", str(args.pyg_batch_size), "--threads",
                        str(threads), "--out", str(out), timeout=3600, threads=threads, cwd=None)
    print(f"  done: {got['impl']}", flush=True)
    return {"config": f"{got['impl']}, 1 rank x {threads} thread{'s' if threads > 1 else ''}",
            "layers_s": got["layers_s"], "nodes_per_s": got["nodes_per_s"],
            "logits": np.load(out, allow_pickle=False)}


if __name__ == "__main__":
    run_bench(main)
