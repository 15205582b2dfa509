"""Bad input to `python -m mpignn.predict` on every rank alike: argv BASE TMP (BASE from tests/test_predict.py's
`trained`). Each case must raise the same one-line error with a HINT on every rank and write nothing."""
import sys
from pathlib import Path

from mpignn.mpi import run_main, world


def main(base: str, tmp: str) -> None:
    from mpignn.errors import MpignnError, is_agreed
    from mpignn.predict.cli import main as predict
    from mpignn.runtime import shutdown

    comm, ckpt, tmp = world(), Path(base) / "ckpt", Path(tmp)
    exists = tmp / "exists"
    if comm.rank == 0:
        exists.mkdir()
        (exists / "mine.txt").write_text("keep")
    comm.Barrier()
    one_part = next((Path(base) / "data" / "mpignn-parts").glob("*-1p-s0"))
    cases = {"exists. HINT: pass --force": ["--checkpoint-dir", ckpt / "sage", "--out", exists],
             "has 1 parts but the job has 2 ranks": ["--checkpoint-dir", ckpt / "sage", "--partitions", one_part],
             "saved by 1 ranks": ["--checkpoint-dir", ckpt / "emb"],
             "--pairs expects a checkpoint": ["--checkpoint-dir", ckpt / "sage", "--pairs", tmp / "pairs.npy"],
             "--generation latest, best or a gen-": ["--checkpoint-dir", ckpt / "sage", "--generation", "gen-000009"]}
    if comm.rank == 0:
        import numpy as np

        np.save(tmp / "pairs.npy", np.array([[0, 1], [2, 3]]))
    comm.Barrier()
    for expected, args in cases.items():
        argv = ["--threads", "1", *([] if "--out" in args else ["--out", str(tmp / "new")]), *map(str, args)]
        try:
            predict(argv)
        except MpignnError as exc:
            text = str(exc)
            assert is_agreed(exc) and expected in text and "HINT" in text and "\n" not in text, text
        else:
            raise AssertionError(f"no error for {args}")
        shutdown()
        assert not (tmp / "new").exists() and [p.name for p in exists.iterdir()] == ["mine.txt"]
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    run_main(main, *sys.argv[1:])
