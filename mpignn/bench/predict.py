"""`python -m mpignn.bench.predict`: exact layer-wise inference (`python -m mpignn.predict`) of one trained
model on 1 rank x T threads and on N ranks x 1 thread: seconds of the layers, nodes/s, rows fetched between
ranks and the peak memory of the largest rank.

    python -m mpignn.bench.predict --dataset npz:/tmp/sbm200k.npz --configs 1x2,1x1,2x1

The model is trained for one step first (`--max-steps 1`): inference costs the same whatever the weights.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from mpignn.bench._common import binding, mpiexec, run_train, table

_LAYERS = re.compile(r"(\d+) layers over (\d+) blocks per rank in ([\d.]+)s, ([\d.]+) MiB of rows fetched")
_PEAK = re.compile(r"peak memory (\d+) MiB")


def predict(ranks: int, threads: int, checkpoint: Path, out: Path, chunk: int) -> dict:
    """One `mpiexec -n ranks python -m mpignn.predict` run, each rank bound to `threads` cores."""
    exe = mpiexec()
    launcher_args, pin = binding(exe, ranks, threads)
    cmd = [exe, *launcher_args, "-n", str(ranks), sys.executable, "-m", "mpignn.predict", "--checkpoint-dir",
           str(checkpoint), "--out", str(out), "--threads", str(threads), "--chunk-size", str(chunk), "--force"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env, preexec_fn=pin)
    log = res.stdout + res.stderr
    layers, peak = _LAYERS.search(log), _PEAK.search(log)
    if res.returncode != 0 or layers is None or peak is None:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{log[-3000:]}")
    return {"layers_s": float(layers.group(3)), "fetched_mib": float(layers.group(4)),
            "peak_mib": float(peak.group(1))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpignn.bench.predict", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic:num_nodes=200000,avg_degree=20,num_features=100")
    parser.add_argument("--model", default="sage")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--configs", default="1x2,1x1,2x1", help="RANKSxTHREADS, comma-separated")
    parser.add_argument("--chunk-size", type=int, default=8192)
    parser.add_argument("--root", default="", help="dataset folder (default: a temporary one)")
    args = parser.parse_args(argv)
    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root, checkpoint = args.root or tmp, Path(tmp) / "ck"
        num_nodes = 0
        for ranks, threads in configs:  # the first config's rank count trains the weights once
            if not checkpoint.exists():
                run_train(ranks, ["--dataset", args.dataset, "--root", root, "--model", args.model, "--hidden",
                                  str(args.hidden), "--fanout", ",".join(["5"] * args.layers), "--epochs", "1",
                                  "--max-steps", "1", "--checkpoint-dir", str(checkpoint)])
            row = predict(ranks, threads, checkpoint, Path(tmp) / f"out-{ranks}x{threads}", args.chunk_size)
            if not num_nodes:
                from mpignn.predict import read_manifest

                num_nodes = int(read_manifest(Path(tmp) / f"out-{ranks}x{threads}")["num_nodes"])
            name = f"{ranks} rank{'s' if ranks > 1 else ''} x {threads} thread{'s' if threads > 1 else ''}"
            row.update(config=name, nodes_per_s=num_nodes / max(row["layers_s"], 1e-4))  # the log's resolution
            rows.append(row)
            print(f"  done: {row['config']}", flush=True)
    base = rows[0]["nodes_per_s"]
    for row in rows:
        row["vs_first"] = row["nodes_per_s"] / base
    print(f"{args.dataset}: exact inference, {args.model} {args.layers} layers hidden {args.hidden}, "
          f"{num_nodes} nodes, chunks of {args.chunk_size} targets")
    print(table(rows, [("config", "config", "s"), ("layers_s", "layers s", ".2f"), ("nodes_per_s", "nodes/s", ".0f"),
                       ("vs_first", "x first", ".2f"), ("fetched_mib", "fetched MiB", ".1f"),
                       ("peak_mib", "peak MiB (max rank)", ".0f")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
