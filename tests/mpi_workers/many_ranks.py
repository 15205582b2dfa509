"""The equivalence checks for many ranks across hosts, then a training run, in one job (one torch import per
rank): distributed sampling and the feature exchange equal one process (dist_sampling.py), one independent DDP
step's gradients equal one process's on the global batch (grad_sync.py), one cooperative step equals one process
(coop_step.py, its `few` pairs); each check prints `MPIGNN-OK rank=R`, all of them `MPIGNN-OK rank=R all`. Then
`python -m mpignn.train TRAIN...` in this process (the test stops a rank during it). argv: folder TRAIN..."""
import sys

import coop_step
import dist_sampling
import grad_sync
from cli_many import run_cli

from mpignn.mpi import run_main, world
from mpignn.runtime import shutdown


def main(folder: str, *train: str) -> int:
    dist_sampling.main(f"{folder}/dist", "metis", 200)
    grad_sync.check("partitioned", "mpi", 10, folder)  # at most 10 seeds a rank: one step of 64 on 6 ranks
    shutdown()
    coop_step.main(f"{folder}/coop", few=True)
    print(f"MPIGNN-OK rank={world().rank} all", flush=True)
    return run_cli("mpignn.train", list(train)) if train else 0


if __name__ == "__main__":
    sys.exit(run_main(main, *sys.argv[1:]))
