"""Train several tiny models in one process (`python -m mpignn.train`'s `main`, 1 rank): argv ROOT BASE
NAME=FLAGS... trains each into BASE/NAME with --checkpoint-dir (flags split on spaces)."""
import sys
from pathlib import Path

from mpignn.mpi import run_main, world

GRAPH = "synthetic:num_nodes=600,avg_degree=6,num_features=12"


def main(root: str, base: str, *runs: str) -> None:
    from mpignn.train import main as train

    for run in runs:
        name, _, flags = run.partition("=")
        assert train(["--dataset", GRAPH, "--root", root, "--epochs", "1", "--fanout", "4,3", "--hidden", "16",
                      "--batch-size", "128", "--threads", "1",
                      "--checkpoint-dir", str(Path(base) / name),
                      *flags.split()]) == 0
    print(f"MPIGNN-OK rank={world().rank}", flush=True)


if __name__ == "__main__":
    run_main(main, *sys.argv[1:])
