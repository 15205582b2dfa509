"""mpignn.mpi on its own: torch, torch-geometric and numba made unimportable before the import, then the
helpers run on every rank (ceil_split, steps_per_epoch, root_first, check_all, alltoallv, allreduce_sum)."""
import importlib.abc
import sys


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torch_geometric", "numba"):
            raise ImportError(f"{name} is blocked: mpignn.mpi must not need it")


sys.meta_path.insert(0, Refuse())
import numpy as np  # noqa: E402

from mpignn.errors import MpignnError  # noqa: E402
from mpignn.mpi import (alltoallv, allreduce_sum, ceil_split, check_all, root_first, run_main,  # noqa: E402
                        steps_per_epoch, world)


def main(folder: str) -> None:
    comm = world()
    r, n = comm.rank, comm.size
    assert ceil_split(np.arange(7), n, r).tolist() == [[0, 1, 2, 3], [4, 5, 6]][r]
    assert steps_per_epoch(comm, 1 + 6 * r, batch_size=3) == 3  # rank 1's 7 items set it
    with root_first(comm, what="writing the marker") as first:
        if first:
            (__import__("pathlib").Path(folder) / "marker").write_text("rank 0")
    assert open(f"{folder}/marker").read() == "rank 0"
    check_all(comm, True, "never raised")
    try:
        check_all(comm, r != 1, "rank 1's check failed")
        raise AssertionError("check_all did not raise")
    except MpignnError as exc:
        assert str(exc) == "rank 1: rank 1's check failed", exc
    counts = np.array([r + 1, 2 * r + 1])  # rank r sends counts[d] rows to rank d
    send = np.concatenate([np.full((c, 2), 10 * r + d) for d, c in enumerate(counts)]).astype(np.float32)
    got, got_counts = alltoallv(comm, send, counts)
    assert got_counts.tolist() == [[1, 2], [1, 3]][r] and got.shape == (sum(got_counts), 2)
    assert got[:, 0].tolist() == [r] * got_counts[0] + [10 + r] * got_counts[1], got
    assert allreduce_sum(comm, [r, 1.5]).tolist() == [1.0, 3.0]
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torch_geometric", "numba"))
    mine = sorted(m for m in sys.modules if m.startswith("mpignn") and not m.startswith("mpignn.mpi"))
    assert heavy == [] and mine == ["mpignn", "mpignn.env", "mpignn.errors"], (heavy, mine)  # watchdog: in mpi
    assert "mpignn.mpi.collectives" in sys.modules, "mpignn.mpi is a package of modules by job"
    print(f"MPIGNN-OK rank={r}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1]))
