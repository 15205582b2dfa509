"""PyG's NeighborLoader (+ GraphSAGE) on the same graph, for side-by-side comparison. Prints one JSON line.

Runs in any interpreter with torch-geometric plus pyg-lib or torch-sparse (often a separate venv, with numba but
without mpi4py: docs/benchmarks.md), so it imports only the parts of mpignn that need numpy, numba and
the standard library.
"""
from __future__ import annotations

import json
import time

import torch

from mpignn.bench._common import bench_parser, pyg_backend
from mpignn.config.graph_options import parse_fanout


def _loader(spec: str, num_neighbors: list[int], batch_size: int, rows: bool = True, train: bool = True):
    """(mpignn's graph, PyG's NeighborLoader over a Data of it; `rows`: with features and labels; `train`:
    shuffled batches of the training nodes, else every node in order)."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    from mpignn.data import load_dataset

    g = load_dataset(spec)
    data = Data(edge_index=torch.from_numpy(g.edge_index()), num_nodes=g.num_nodes,
                **({"x": torch.from_numpy(g.x), "y": torch.from_numpy(g.y)} if rows else {}))
    seeds = {"shuffle": True, "input_nodes": torch.from_numpy(g.train_idx)} if train else {"shuffle": False}
    return g, NeighborLoader(data, num_neighbors=num_neighbors, batch_size=batch_size, **seeds)


def sample(spec: str, fanout: list[int], batch_size: int, batches: int, threads: int) -> dict:
    """Time index sampling, as `bench.sampler` times mpignn's: no features or labels, so no rows gathered."""
    torch.set_num_threads(threads)
    g, loader = _loader(spec, fanout, batch_size, rows=False)
    it = iter(loader)
    next(it)  # conversion to CSC and warm-up
    edges, start = 0, time.perf_counter()
    for _ in range(batches):
        edges += next(it).edge_index.size(1)
    seconds = time.perf_counter() - start
    return {"impl": f"PyG NeighborLoader ({pyg_backend() or 'none'})", "threads": threads,
            "batches_per_s": batches / seconds, "edges_per_s": edges / seconds}


def epoch(spec: str, fanout: list[int], batch_size: int, hidden: int, threads: int, device: str = "cpu") -> dict:
    """Time one epoch after warm-up; the sampler runs on the CPU as PyG users run it, training on `device`."""
    from torch_geometric.nn.models import GraphSAGE

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    g, loader = _loader(spec, fanout, batch_size)
    dev = torch.device(device)
    model = GraphSAGE(g.num_features, hidden, len(fanout), g.num_classes).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)

    def step(batch) -> None:
        batch = batch.to(dev, non_blocking=True)
        opt.zero_grad()
        kwargs = {}
        if "num_sampled_nodes" in batch:  # pyg-lib provides it; torch-sparse does not
            kwargs = {"num_sampled_nodes_per_hop": batch.num_sampled_nodes,
                      "num_sampled_edges_per_hop": batch.num_sampled_edges}
        out = model(batch.x, batch.edge_index, **kwargs)[:batch.batch_size]
        torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        opt.step()

    for i, batch in enumerate(loader):  # warm-up: CSC conversion, allocator, kernels
        step(batch)
        if i == 2:
            break
    start = time.perf_counter()
    for batch in loader:
        step(batch)
    if dev.type != "cpu":
        getattr(torch, dev.type).synchronize()
    seconds = time.perf_counter() - start
    backend = pyg_backend() or "none"
    trimmed = " trimmed" if backend == "pyg-lib" else ""
    return {"impl": f"PyG NeighborLoader ({backend}) + GraphSAGE{trimmed}",
            "threads": threads, "device": device, "epoch_s": seconds, "seeds_per_s": len(g.train_idx) / seconds}


def infer(spec: str, checkpoint: str, hidden: int, layers: int, batch_size: int, threads: int, out: str) -> dict:
    """Time PyG's layer-wise inference (as its examples run it) of a `--model sage` checkpoint; logits to `out`."""
    from torch_geometric.nn.models import GraphSAGE

    from mpignn.fileio import atomic_path, save_npy

    torch.set_num_threads(threads)
    g, loader = _loader(spec, [-1], batch_size, train=False)
    model = GraphSAGE(g.num_features, hidden, layers, g.num_classes)
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["model"]
    model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
    model.eval()
    start = time.perf_counter()
    logits = model.inference(loader)
    seconds = time.perf_counter() - start
    with atomic_path(out) as tmp:  # the caller reads `out`: whole or absent, never half-written
        save_npy(tmp, logits.numpy())
    return {"impl": f"PyG layer-wise inference ({pyg_backend() or 'none'})", "threads": threads,
            "layers_s": seconds, "nodes_per_s": g.num_nodes / seconds}


def main() -> None:
    parser = bench_parser("mpignn.bench._pyg_reference", __doc__, fanout="15,10,5", batch_size=1024, batches=20,
                          threads=1, hidden=256, device="cpu", layers=3)
    parser.add_argument("mode", choices=["sample", "epoch", "infer"])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--checkpoint", help="infer: a checkpoint.pt of --model sage")
    parser.add_argument("--out", help="infer: where the logits go (npy)")
    a = parser.parse_args()
    fanout = parse_fanout(a.fanout)
    if a.mode == "infer":
        row = infer(a.dataset, a.checkpoint, a.hidden, a.layers, a.batch_size, a.threads, a.out)
    elif a.mode == "sample":
        row = sample(a.dataset, fanout, a.batch_size, a.batches, a.threads)
    else:
        row = epoch(a.dataset, fanout, a.batch_size, a.hidden, a.threads, a.device)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
