"""Run `python -m mpignn.predict` (its `main`) for several checkpoints in one job: argv OUT_BASE CKPT_DIR...;
each writes OUT_BASE/<name of CKPT_DIR>-n<ranks> with --logits (one start-up for many predictions). Every other
checkpoint fetches its halo rows in groups smaller than a layer (--halo-mib 0.01: on 2 ranks, 3 exchanges for 2
layers of 4 blocks), the rest all at once."""
import sys
from pathlib import Path

from mpignn.mpi import run_main, world


def main(out_base: str, *checkpoints: str) -> None:
    from mpignn.predict.cli import main as predict

    size = world().size
    for i, ckpt in enumerate(checkpoints):
        out = Path(out_base) / f"{Path(ckpt).name}-n{size}"
        assert predict(["--checkpoint-dir", ckpt, "--out", str(out), "--logits", "--threads", "1",
                        "--chunk-size", "97", "--halo-mib", "0.01" if i % 2 else "512"]) == 0
    print(f"MPIGNN-OK rank={world().rank}", flush=True)


if __name__ == "__main__":
    run_main(main, *sys.argv[1:])
