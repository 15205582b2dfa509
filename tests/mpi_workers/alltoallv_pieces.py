"""alltoallv in pieces (MAX_COUNT lowered to LIMIT) equals the one-call result and the expected rows, for
uneven and empty sends, 1-D and 2-D arrays and several dtypes; the pieces path must really be taken."""
import sys

import numpy as np

import mpignn.mpi.collectives as collectives
from mpignn.mpi import alltoallv, run_main, world

DTYPES = [np.int64, np.float32, np.bool_, np.float16, np.dtype([("a", "<i4"), ("b", "<f8")])]


class Recording:
    """Passes every call on to the communicator and remembers the names of the methods called."""

    def __init__(self, comm):
        self.comm, self.calls = comm, set()

    def __getattr__(self, name):
        self.calls.add(name)
        return getattr(self.comm, name)


def count(src: int, dest: int, case: int) -> int:
    if case == 0 and src == 1:
        return 0  # rank 1 sends nothing at all
    return (src * 7 + dest * 3 + case * 5) % 11  # uneven, zeros included


def rows(src: int, dest: int, case: int, shape: tuple, dtype) -> np.ndarray:
    base = np.arange(count(src, dest, case) * int(np.prod(shape)), dtype=np.int64).reshape(-1, *shape)
    values = (base + 1000 * src + 100 * dest) % 251
    out = np.zeros(values.shape, dtype=dtype)
    if out.dtype.names:
        out["a"], out["b"] = values, values / 4
    else:
        out[...] = values if out.dtype != np.bool_ else values % 2
    return out


def main(limit: int) -> None:
    comm, n = world(), world().size
    taken = 0
    for case, shape in enumerate([(), (3,), (2, 2)]):
        for dtype in DTYPES:
            send = np.concatenate([rows(comm.rank, d, case, shape, dtype) for d in range(n)])
            counts = np.array([count(comm.rank, d, case) for d in range(n)])
            expected = np.concatenate([rows(s, comm.rank, case, shape, dtype) for s in range(n)])
            plain, plain_counts = alltoallv(comm, send, counts)
            collectives.MAX_COUNT = limit
            rec = Recording(comm)
            got, got_counts = alltoallv(rec, send, counts)
            collectives.MAX_COUNT = 2**31 - 1
            assert "Alltoallv" not in rec.calls and {"Isend", "Irecv"} & rec.calls, rec.calls
            assert got.dtype == send.dtype and got.shape == expected.shape, (got.shape, expected.shape)
            assert np.array_equal(got, expected) and np.array_equal(plain, expected), (case, dtype)
            assert got_counts.tolist() == plain_counts.tolist() == [count(s, comm.rank, case) for s in range(n)]
            taken += 1
    print(f"MPIGNN-OK rank={comm.rank} cases={taken}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, int(sys.argv[1])))
