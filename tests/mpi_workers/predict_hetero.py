"""Train a heterogeneous run with learnable rows of the featureless type on this job's ranks, then predict it
and other checkpoints (`python -m mpignn.predict`'s `main`): argv DATASET ROOT BASE CKPT_DIR...; the run trains
into BASE/ckpt/emb-n<ranks>, each prediction goes to BASE/out/<name of its CKPT_DIR>-n<ranks> with --logits."""
import sys
from pathlib import Path

from mpignn.mpi import run_main, world


def main(dataset: str, root: str, base: str, *checkpoints: str) -> None:
    from mpignn.predict.cli import main as predict
    from mpignn.train import main as train

    size = world().size
    emb = Path(base) / "ckpt" / f"emb-n{size}"
    assert train(["--dataset", dataset, "--root", root, "--epochs", "1", "--fanout", "4,3", "--hidden", "16",
                  "--batch-size", "128", "--threads", "1", "--model", "sage", "--embed-dim", "4",
                  "--checkpoint-dir", str(emb)]) == 0
    for ckpt in [*checkpoints, str(emb)]:
        out = Path(base) / "out" / f"{Path(ckpt).name.split('-n')[0]}-n{size}"
        assert predict(["--checkpoint-dir", ckpt, "--out", str(out), "--logits", "--threads", "1",
                        "--chunk-size", "97"]) == 0
    print(f"MPIGNN-OK rank={world().rank}", flush=True)


if __name__ == "__main__":
    run_main(main, *sys.argv[1:])
