"""`python -m mpignn.bench.floor`: how fast N ranks could train a graph if communication were free.

The rows run one loop; the gap between the communication-free row and 1 x N threads is what neighbourhood
overlap costs against what threads gain. Where the floor is not clearly faster than 1 x N, no exchange work can
make N ranks beat 1 rank x N threads on that machine (the rows: docs/benchmarks.md).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mpignn.bench._common import TEMP_ROOT, bench_parser, mpi_command, run_json, table


def _prepare(dataset: str, root: str, parts: int, seed: int) -> Path:
    from mpignn.data import dataset_key, load_dataset
    from mpignn.partition import partition_graph
    from mpignn.partition.source import auto_folder

    folder = auto_folder(root, dataset_key(dataset), "metis", parts, seed)
    if not (folder / "META.json").is_file():
        partition_graph(load_dataset(dataset, root), parts, folder, method="metis", seed=seed,
                        dataset=dataset_key(dataset), force=True)
    return folder


def _worker(args: argparse.Namespace) -> None:
    from mpignn.launch.allocator import prefer_huge_pages, tune_allocator

    prefer_huge_pages()  # before torch's first allocation, as `mpignn.train` does
    import torch
    from mpi4py import MPI

    from mpignn.exchange.alltoall import MpiAlltoall
    from mpignn.exchange.halo import Halo
    from mpignn.models.sampled import SampledGNN
    from mpignn.partition.format import load_partition, read_meta
    from mpignn.mpi import allreduce_sum
    from mpignn.sampling.cooperative import CooperativeSampler, union_rows
    from mpignn.training.optim import adam
    from mpignn.training.record import redundancy
    from mpignn.sampling.neighbor import LocalHops, NeighborSampler

    tune_allocator()
    torch.set_num_threads(args.threads)
    comm = MPI.COMM_WORLD
    meta = read_meta(args.folder)
    fanout = [int(f) for f in args.fanout.split(",")]
    if args.cooperative:
        part = load_partition(args.folder, comm.rank, mmap=True)
        x, y, train, lo = np.asarray(part.x), np.asarray(part.y), part.train_idx, part.lo
        sampler = CooperativeSampler(comm.Dup(), LocalHops(part.rowptr, part.col, part.lo),
                                     np.asarray(meta.part_offsets), fanout, MpiAlltoall(comm.Dup()))
    else:
        parts = [load_partition(args.folder, p, mmap=True) for p in range(meta.num_parts)]
        rowptr = np.concatenate([parts[0].rowptr] + [p.rowptr[1:] + off for p, off in
                                                      zip(parts[1:], np.cumsum([len(q.col) for q in parts])[:-1])])
        col = np.concatenate([p.col for p in parts])
        x = np.concatenate([np.asarray(p.x) for p in parts])
        y = np.concatenate([np.asarray(p.y) for p in parts])
        train = parts[comm.rank].train_idx if comm.size > 1 else np.concatenate([p.train_idx for p in parts])
        sampler, lo = NeighborSampler(LocalHops(rowptr, col), meta.num_nodes, fanout, method=args.sampler), 0
    torch.manual_seed(0)
    model = SampledGNN("sage", x.shape[1], args.hidden, int(meta.num_classes), len(fanout))
    optimizer = adam(model.parameters(), lr=args.lr)
    share = -(-args.batch_size // comm.size)  # each rank's ceiling-division share of the global batch
    rng = np.random.default_rng(comm.rank)
    times, rows, inputs = np.zeros(3), 0, 0
    per_layer = np.zeros((2, len(fanout) + 1))  # (rows over all ranks, distinct nodes among them) per layer
    warmup = 3
    for step in range(warmup + args.steps):
        if step == warmup:
            times[:], rows, inputs = 0.0, 0, 0
            sampler.halo_bytes = 0
        seeds = rng.choice(train, min(share, len(train)), replace=False)
        t0 = time.perf_counter()
        out = sampler.sample(seeds, step)
        t1 = time.perf_counter()
        halo = Halo(out.halo, sampler.rows, sampler) if args.cooperative else None
        # cooperative: the input table with room for the rows other ranks send (as the loader makes it)
        feats = np.empty((halo.table_rows(0) if halo else len(out.n_id), x.shape[1]), dtype=x.dtype)
        np.take(x, out.n_id - lo, axis=0, out=feats[:len(out.n_id)], mode="clip")  # "clip": no buffered copy
        t2 = time.perf_counter()
        edge_index = torch.from_numpy(np.stack([out.row, out.col]))
        logits = model(torch.from_numpy(feats), edge_index, out.num_sampled_nodes, out.num_sampled_edges,
                       torch.from_numpy(out.in_degree), halo=halo,
                       mean_over=None if out.mean_over is None else torch.from_numpy(out.mean_over))
        # cooperative: the loss of the global batch's mean (every rank's share), gradients summed over ranks
        labels = torch.from_numpy(y[out.n_id[:len(seeds)] - lo])
        loss = torch.nn.functional.cross_entropy(logits, labels, reduction="sum") / (share * comm.size)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if args.cooperative:
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            comm.Allreduce(MPI.IN_PLACE, flat.numpy(), op=MPI.SUM)
            torch.nn.utils.vector_to_parameters(flat, [p.grad for p in model.parameters()])
        optimizer.step()
        times += [t1 - t0, t2 - t1, time.perf_counter() - t2]
        rows += sum(out.num_sampled_nodes[:-1])
        inputs += sum(out.num_sampled_nodes)
        if step >= warmup:  # untimed, collective: every layer's rows of all ranks against their distinct nodes
            sizes = out.num_sampled_nodes
            per_layer += [allreduce_sum(comm, [sum(sizes[:len(sizes) - j]) for j in range(len(sizes))]),
                          union_rows(comm, meta.part_offsets, out.n_id, sizes)]
    per_rank = comm.gather({"times": times.tolist(), "rows": rows / args.steps, "inputs": inputs / args.steps,
                            "halo": getattr(sampler, "halo_bytes", 0) / args.steps,
                            "redundancy": redundancy(*per_layer)}, root=0)
    if comm.rank == 0:
        print(json.dumps(per_rank), flush=True)


def worker_args(folder: Path, threads: int, args: argparse.Namespace, cooperative: bool = False,
                sampler: str = "neighbor") -> list[str]:
    """Return the worker's own flags for one row (after `python -m mpignn.bench.floor`)."""
    return ["--worker", "--folder", str(folder), "--threads", str(threads), "--steps", str(args.steps),
            "--fanout", args.fanout, "--batch-size", str(args.batch_size), "--hidden", str(args.hidden),
            "--lr", str(args.lr), "--sampler", sampler, *(["--cooperative"] if cooperative else [])]


def _launch(folder: Path, ranks: int, threads: int, args: argparse.Namespace, cooperative: bool = False,
            sampler: str = "neighbor") -> list[dict]:
    start, pin = mpi_command(ranks, threads)
    return run_json([*start, "mpignn.bench.floor", *worker_args(folder, threads, args, cooperative, sampler)],
                    env={**os.environ, "OMP_NUM_THREADS": str(threads)}, pin=pin)


def _row(name: str, per_rank: list[dict]) -> dict:
    """The slowest rank's seconds: the others would wait for it at the all-reduce."""
    slowest = max(per_rank, key=lambda r: sum(r["times"]))
    sample, gather, compute = slowest["times"]
    return {"config": name, "seconds": sample + gather + compute, "sample": sample, "gather": gather,
            "compute": compute, "rows": slowest["rows"], "all_rows": sum(r["rows"] for r in per_rank),
            "inputs": sum(r["inputs"] for r in per_rank), "halo_mib": sum(r["halo"] for r in per_rank) / 2**20,
            "redundancy": per_rank[0].get("redundancy")}


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("mpignn.bench.floor", __doc__, dataset="synthetic", root=TEMP_ROOT, ranks=2,
                          steps=(20, "timed steps (after 3 warm-up steps)"), fanout="15,10,5",
                          batch_size=(1024, "global batch"), hidden=256, lr=0.003,
                          seed=(0, "the partition's seed (as mpignn.train --seed)"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--cooperative", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sampler", default="neighbor", help=argparse.SUPPRESS)
    parser.add_argument("--labor", action="store_true",
                        help="add the 1 x 1 and communication-free rows with --sampler labor")
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    n = args.ranks
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp
        whole = _prepare(args.dataset, root, 1, args.seed)
        parts = _prepare(args.dataset, root, n, args.seed)
        rows = [_row("1 rank x 1 thread", _launch(whole, 1, 1, args)),
                _row(f"1 rank x {n} threads", _launch(whole, 1, n, args)),
                _row(f"{n} ranks x 1 thread, no communication", _launch(parts, n, 1, args)),
                _row(f"{n} ranks x 1 thread, cooperative", _launch(parts, n, 1, args, cooperative=True))]
        if args.labor:
            rows += [_row("1 rank x 1 thread, labor", _launch(whole, 1, 1, args, sampler="labor")),
                     _row(f"{n} ranks x 1 thread, no communication, labor",
                          _launch(parts, n, 1, args, sampler="labor"))]
    for row in rows:
        row["vs_first"] = row["seconds"] / rows[0]["seconds"]
        row["vs_threads"] = row["seconds"] / rows[1]["seconds"]
    print(f"{args.dataset}: {args.steps} steps of a {args.batch_size}-seed global batch, fanout {args.fanout}, "
          f"hidden {args.hidden}; seconds of the slowest rank (cooperative: its exchanges and gradient all-reduce "
          f"included, in sample and compute)")
    print(table(rows, [("config", "config", "s"), ("seconds", "seconds", ".2f"), ("vs_first", "x 1x1", ".2f"),
                       ("vs_threads", f"x 1x{n}", ".2f"), ("sample", "sample", ".2f"), ("gather", "gather", ".2f"),
                       ("compute", "compute", ".2f"), ("rows", "layer-1 rows/rank", ".0f"),
                       ("all_rows", "layer-1 rows, all ranks", ".0f"), ("inputs", "input rows, all ranks", ".0f"),
                       ("halo_mib", "rows moved MiB/step", ".2f"), ("redundancy", "redundancy", ".3f")]))
    print("redundancy: rows of all ranks / distinct nodes among them, the largest over the layers (input rows "
          "included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())  # not exit_process: the tests run its ranks in their standing jobs, as a script
