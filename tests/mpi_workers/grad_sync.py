"""One DDP training step's gradients equal one process's on the same global batch (features and labels read
from the whole graph). Args: ROOT CASE...; each CASE is MODE:EXCHANGE:NUM_TRAIN (MODE replicated|partitioned,
EXCHANGE mpi|torch), run in order in this one job; each passed case prints `MPIGNN-OK rank=R case=CASE`."""
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mpignn.training.ddp import wrap_ddp
from mpignn.training.epoch import train_epoch
from mpignn.models import build_model
from mpignn.tasks.node import NodeTask
from mpignn.mpi import root_first, run_main, world
from mpignn.runtime import bootstrap, load_local_graph, shutdown
from mpignn.training.loaders import make_loader


def write_graph(path: Path, num_train: int, n: int = 80) -> None:
    rng = np.random.default_rng(1)
    src = np.concatenate([np.arange(n), rng.integers(0, n, 4 * n)])
    dst = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, 4 * n)])
    np.savez(path, edge_index=np.stack([src, dst]).astype(np.int64), x=rng.standard_normal((n, 8), np.float32),
             y=rng.integers(0, 3, n), train_idx=np.arange(num_train), val_idx=np.arange(60, 70),
             test_idx=np.arange(70, 80), num_classes=np.int64(3))


def check(mode: str, exchange: str, num_train: int, root: str) -> None:
    rt = bootstrap(threads=1)
    path = Path(root) / f"grad{num_train}.npz"
    with root_first(rt.comm) as first:
        if first and not path.exists():
            write_graph(path, num_train)
    whole = np.load(path)
    graph = load_local_graph(rt, f"npz:{path}", root, replicated=mode == "replicated", fanout=[3, 3],
                             exchange=exchange)
    loader = make_loader(rt, graph, "train", batch_size=64, prefetch="off")
    torch.manual_seed(0)
    model, reference = build_model("sage", 8, 16, 3, 2), build_model("sage", 8, 16, 3, 2)
    reference.load_state_dict(model.state_dict())
    ddp, _ = wrap_ddp(model, rt.comm, rt.device)
    seen = []
    tap = type("Tap", (), {"__iter__": lambda s: (seen.append(b) or b for b in loader), "__len__": lambda s: 1})
    sums = train_epoch(ddp, tap(), torch.optim.SGD(model.parameters(), lr=0.0), task=NodeTask(), device=rt.device, comm=rt.comm)
    assert sums["steps"] == 1 and len(seen) == 1, sums
    b = seen[0]
    batches = rt.comm.allgather((b.n_id, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges, b.batch_size))
    assert sum(n for *_, n in batches) == num_train, "one step must cover every training node once"
    if num_train < rt.world_size:
        assert min(n for *_, n in batches) == 0, "the test needs a rank without seeds"
    node_map = np.load(graph.folder / "node_map.npy")
    orig = np.empty_like(node_map)
    orig[node_map] = np.arange(len(node_map))
    loss = torch.zeros(())
    for n_id, edge_index, nodes, edges, n in batches:
        ids = orig[n_id.numpy()]
        logits = reference(torch.from_numpy(whole["x"][ids]), edge_index, nodes, edges)
        loss = loss + F.cross_entropy(logits, torch.from_numpy(whole["y"][ids[:n]]), reduction="sum")
    (loss / num_train).backward()  # the gradient of the mean loss over the step's seeds on all ranks
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        err = (p.grad - q.grad).abs().max().item()
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-6), f"rank {rt.rank} {name}: max error {err}"


def main(root: str, *cases: str) -> None:
    for case in cases:
        mode, exchange, num_train = case.split(":")
        check(mode, exchange, int(num_train), root)
        shutdown()
        print(f"MPIGNN-OK rank={world().rank} case={case}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, *sys.argv[1:]))
