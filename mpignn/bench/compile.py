"""`python -m mpignn.bench.compile`: seconds to compile the sampling kernels from an empty numba cache, by
numba's thread count (one thread compiles the serial twins, `mpignn.compiled.serial_or_parallel`).

A fresh install compiles every kernel on its first run; this is that cost, each count in a new process with its
own empty cache folder. Example: python -m mpignn.bench.compile --threads 1,2
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

from mpignn.bench._common import table

_CHILD = """
import sys, time
import numba
numba.set_num_threads(int(sys.argv[1]))
from mpignn.sampling import kernels
start = time.perf_counter()
kernels.warm_up()
print(time.perf_counter() - start)
"""


def compile_seconds(threads: int) -> float:
    """Seconds `kernels.warm_up()` takes with `threads` numba threads in a new process and an empty cache."""
    with tempfile.TemporaryDirectory(prefix="mpignn-compile-") as folder:
        env = {**os.environ, "NUMBA_CACHE_DIR": folder, "NUMBA_NUM_THREADS": str(max(threads, 1))}
        out = subprocess.run([sys.executable, "-c", _CHILD, str(threads)], env=env, capture_output=True, text=True,
                             timeout=600, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpignn.bench.compile", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="numba thread counts to time, comma-separated")
    args = parser.parse_args(argv)
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        rows.append({"threads": threads, "kernels": "serial" if threads == 1 else "parallel",
                     "seconds": compile_seconds(threads)})
    print(table(rows, [("threads", "numba threads", "d"), ("kernels", "sample_rows", "s"),
                       ("seconds", "compile s (warm_up)", ".2f")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
