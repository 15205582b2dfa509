"""`python -m mpignn.bench.blocks`: what one big block costs under each malloc policy, outside training.

Each policy runs in its own process: steps of 8 blocks of random sizes in a band taken and freed through the
process's malloc (ctypes), the first 4 KiB of each written. Prints microseconds per block, the resident memory
the timed steps added, and for the page pool the share of blocks taken where a freed run lay. With `--mpi`,
mpi4py is imported first, so MPI's UCX watches every mmap, munmap and mremap (docs/failures.md, "The page pool").

    python -m mpignn.bench.blocks
    python -m mpignn.bench.blocks --mpi --pool-source old_bigblocks.c
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from mpignn.bench._common import table

BANDS = ((256 << 10, 2 << 20), (2 << 20, 8 << 20), (8 << 20, 32 << 20))

CHILD = r"""
import ctypes, json, os, random, sys, time
steps, mpi = int(sys.argv[1]), sys.argv[2] == "1"
if mpi:
    from mpi4py import MPI  # noqa: F401  (initialises MPI, and UCX's memory hooks with it)
from mpignn.launch import allocator
allocator.tune_allocator()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
def run(rng, lo, hi, n):
    for _ in range(n):
        blocks = [libc.malloc(rng.randrange(lo, hi)) for _ in range(8)]
        for p in blocks:
            ctypes.memset(p, 1, 4096)
        for p in blocks:
            libc.free(p)
out = []
for lo, hi in json.loads(sys.argv[3]):
    rng = random.Random(0)
    run(rng, lo, hi, steps // 10)  # warm-up
    before, stats, t = rss(), allocator.pages_stats(), time.perf_counter()
    run(rng, lo, hi, steps)
    dt, after = time.perf_counter() - t, allocator.pages_stats()
    placed = None if stats is None else (after["in_place"] - stats["in_place"]) / (after["blocks"] - stats["blocks"])
    out.append({"band": f"{lo >> 10}-{hi >> 10} KiB", "us": dt * 1e6 / (8 * steps), "rss": rss() - before,
                "in_place": placed})
print(json.dumps(out))
"""


def measure(policy: str, steps: int, mpi: bool, library: str | None) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MPIGNN_MALLOC")}
    env["MPIGNN_MALLOC"] = policy
    if policy == "pages":
        env["LD_PRELOAD"] = library
    out = subprocess.run([sys.executable, "-c", CHILD, str(steps), "1" if mpi else "0", json.dumps(BANDS)],
                         capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"bench.blocks: MPIGNN_MALLOC={policy} failed: {last}")
    return [{"policy": policy, **row} for row in json.loads(out.stdout.strip().splitlines()[-1])]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m mpignn.bench.blocks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2000, help="timed steps of 8 blocks per size band")
    ap.add_argument("--mpi", action="store_true", help="import mpi4py first (MPI's memory hooks on)")
    ap.add_argument("--policies", default="heap,mapped,pages", help="MPIGNN_MALLOC policies, comma-separated")
    ap.add_argument("--pool-source", default="", help="another bigblocks.c to build the pool from (an old one)")
    args = ap.parse_args(argv)
    from mpignn.launch import allocator

    library = allocator.build_pages(source=args.pool_source or None)
    rows = []
    try:
        for policy in args.policies.split(","):
            if policy == "pages" and library is None:
                raise SystemExit("bench.blocks: no C compiler builds the page pool here. HINT: install gcc or set CC")
            rows += measure(policy, args.steps, args.mpi, library)
    finally:
        if library:
            os.remove(library)
            os.rmdir(os.path.dirname(library))
    print(table(rows, [("policy", "MPIGNN_MALLOC", "s"), ("band", "block sizes", "s"), ("us", "us per block", ".2f"),
                       ("rss", "RSS added MiB", ".1f"), ("in_place", "taken in place", ".2f")]))


if __name__ == "__main__":
    main()
