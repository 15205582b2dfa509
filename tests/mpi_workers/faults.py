"""Inject one fault on one rank in the middle of distributed training: MODE kill | sampling | exchange |
backward. The job must end fast with that rank's message."""
import os
import signal
import sys

import torch
import torch.nn.functional as F

from mpignn.training.ddp import wrap_ddp
from mpignn.models import build_model, forward_batch
from mpignn.mpi import run_main
from mpignn.runtime import bootstrap, load_local_graph
from mpignn.training.loaders import make_loader

FAULT_STEP = 3


def main(mode: str, bad_rank: int, root: str) -> None:
    rt = bootstrap(threads=1)
    graph = load_local_graph(rt, "synthetic:num_nodes=6000,avg_degree=8,num_features=8", root, fanout=[5, 5])
    loader = make_loader(rt, graph, "train", batch_size=64)
    model = build_model("sage", graph.num_features, 16, graph.num_classes, 2)
    ddp, _ = wrap_ddp(model, rt.comm, rt.device)
    opt = torch.optim.Adam(model.parameters())
    mine = rt.rank == bad_rank
    step = {"n": 0}
    if mine and mode == "sampling":
        inner = graph.sampler.source.local.sample

        def sample(*args):
            if step["n"] == FAULT_STEP:
                raise RuntimeError(f"injected sampling fault on rank {rt.rank}")
            return inner(*args)
        graph.sampler.source.local.sample = sample
    if mine and mode == "exchange":
        inner_fetch = graph.features.fetch

        def fetch(gids):
            if step["n"] == FAULT_STEP:
                raise RuntimeError(f"injected exchange fault on rank {rt.rank}")
            return inner_fetch(gids)
        graph.features.fetch = fetch
    for batch in loader:
        if mine and mode == "kill" and step["n"] == FAULT_STEP:
            print(f"rank {rt.rank} kills itself (pid {os.getpid()})", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        loss = F.cross_entropy(forward_batch(ddp, batch), batch.y[:batch.batch_size])
        if mine and mode == "backward" and step["n"] == FAULT_STEP:
            loss.register_hook(lambda g: (_ for _ in ()).throw(RuntimeError(f"injected backward fault on rank {rt.rank}")))
        opt.zero_grad()
        loss.backward()
        opt.step()
        step["n"] += 1
    print(f"MPIGNN-OK rank={rt.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1], int(sys.argv[2]), sys.argv[3]))
