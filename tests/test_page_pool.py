"""The page pool (`mpignn/launch/bigblocks.c`, MPIGNN_MALLOC=pages): big blocks made of pooled chunks, each block's
bytes its own, calloc zero, memory bounded by the most in use at once, the CLI preloading it and cleaning up."""
import os
import shutil
import subprocess
import sys

import pytest

from mpignn.launch import allocator


@pytest.fixture(scope="module")
def library():
    path = allocator.build_pages()
    if path is None:
        pytest.skip("no C compiler builds the page pool here")
    yield path
    os.remove(path)
    os.rmdir(os.path.dirname(path))


def run(library, code, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith("MPIGNN_MALLOC")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**base, "LD_PRELOAD": library, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout


LIBC = """
import ctypes, os, random
from mpignn.launch import allocator
libc = ctypes.CDLL(None)  # the process's malloc (the preloaded one), not libc.so.6's own
for name in ("malloc", "calloc", "realloc", "memalign"):
    getattr(libc, name).restype = ctypes.c_void_p
libc.malloc.argtypes, libc.free.argtypes = [ctypes.c_size_t], [ctypes.c_void_p]
libc.calloc.argtypes, libc.realloc.argtypes = [ctypes.c_size_t] * 2, [ctypes.c_void_p, ctypes.c_size_t]
libc.memalign.argtypes = [ctypes.c_size_t] * 2
def fill(p, n, byte):
    ctypes.memset(p, byte, n)
def holds(p, n, byte):  # 4 KiB at each end and in the middle
    return all(ctypes.string_at(p + at, 4096) == bytes([byte]) * 4096 for at in (0, (n - 4096) // 2, n - 4096))
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
"""

STEPS = LIBC + """
assert allocator.policy() == "pages"
rng, most, pooled, before = random.Random(0), [0, 0], 0, allocator.pages_stats()["pooled_mb"]  # (imports')
def chunks(sizes, big):  # bytes in whole chunks of the two pools (2 MiB from 2 MiB on, 64 KiB below)
    c = 2 << 20 if big else 64 << 10
    return sum(-(-(n + 64) // c) * c for n in sizes if (n + 64 >= 2 << 20) == big)
for step in range(300):
    live = []
    for i in range(8):  # a step's blocks, 256 KiB to 24 MiB and of other sizes every step
        n = rng.randrange(256 << 10, 24 << 20)
        p = libc.calloc(1, n) if i % 3 == 0 else libc.malloc(n)
        assert p % 64 == 0
        if i % 3 == 0:
            assert holds(p, n, 0), "calloc gave old bytes"
        fill(p, n, 1 + (step * 8 + i) % 250)
        live.append((p, n, 1 + (step * 8 + i) % 250))
    p, n, byte = live.pop()
    q = libc.realloc(p, 2 * n)
    assert holds(q, n, byte), "realloc lost the contents"
    live.append((q, 2 * n, byte))
    sizes = [m for _, m, _ in live] + [n]  # the old block was in use beside the new one
    most = [max(most[0], chunks(sizes, True)), max(most[1], chunks(sizes, False))]
    for p, n, byte in live:
        assert holds(p, n // 2 if p == q else n, byte), "a block's bytes changed under it"
        libc.free(p)
    pooled = max(pooled, allocator.pages_stats()["pooled_mb"])
stats = allocator.pages_stats()
print(round(pooled), round(sum(most) / 2**20 + before), stats["chunks_reused"], stats["blocks"])
"""


def test_blocks_keep_their_bytes_and_the_pool_never_holds_more_than_was_in_use(library):
    # 300 steps of 9 blocks of other sizes each: no block's bytes change under it, calloc's are zero, realloc keeps
    # them; the pool (new pages are mapped only when it runs dry) never holds more than was in use at once, per
    # chunk size.
    pooled, most, reused, blocks = map(int, run(library, STEPS).split())
    assert blocks >= 300 * 9 and reused > 0
    assert pooled <= most, (pooled, most)


def test_the_same_with_runs_moved_chunk_by_chunk_as_before_linux_6_17():
    # Before Linux 6.17 one mremap moves one kernel mapping, and a run can span several: the pool moves it chunk
    # by chunk there. Built to take that path always, the blocks keep their bytes and the bound holds.
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    library = allocator.build_pages(cc=f"{cc} -DBIGBLOCKS_CHUNKWISE") if cc else None
    if library is None:
        pytest.skip("no C compiler builds the page pool here")
    try:
        pooled, most, reused, blocks = map(int, run(library, STEPS).split())
    finally:
        os.remove(library)
        os.rmdir(os.path.dirname(library))
    assert blocks >= 300 * 9 and reused > 0
    assert pooled <= most, (pooled, most)


IN_PLACE = LIBC + """
p = libc.malloc(1 << 20)  # 1 MiB + the 64-byte head: a run of 17 chunks of 64 KiB once freed
libc.free(p)
big = libc.malloc(4 << 20)  # no run holds it: new pages
before = allocator.pages_stats()
q = libc.malloc(512 << 10)  # 9 chunks, from the run's start
r = libc.malloc(300 << 10)  # 5 chunks, right after them
after = allocator.pages_stats()
print(q - p, r - p, after["in_place"] - before["in_place"], after["chunks_new"] - before["chunks_new"])
"""


def test_a_freed_run_that_holds_a_block_is_used_where_it_lies(library):
    # Each chunk moved is a system call (and an event MPI's UCX queues): a block that fits a freed run takes it.
    q, r, in_place, new = map(int, run(library, IN_PLACE).split())
    assert (q, r, in_place, new) == (0, 9 * 64 << 10, 2, 0)


ODD_REQUESTS = LIBC + """
p = libc.memalign(4096, 1 << 20)  # alignments above 64 bytes: glibc's, as before
assert p % 4096 == 0
libc.free(p)
small = libc.malloc(100)  # small blocks: glibc's
fill(small, 100, 7)
big = libc.realloc(small, 1 << 20)  # glibc's block stays glibc's
assert ctypes.string_at(big, 100) == bytes([7]) * 100
assert libc.realloc(big, 0) is None
import numpy as np, threading, torch
def work(seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(30):
        a = torch.randn(512, 512 + seed, generator=g)
        assert torch.equal(a @ torch.eye(a.shape[1]), a)
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
pid = os.fork()
if pid == 0:
    x = np.ones(1 << 20)
    os._exit(0 if x.sum() == 1 << 20 else 1)
assert os.waitpid(pid, 0)[1] == 0
assert np.zeros(1 << 20).sum() == 0
print("ok")
"""


def test_odd_requests_threads_and_fork(library):
    assert run(library, ODD_REQUESTS).strip() == "ok"


def test_an_unused_pool_gives_its_pages_back(library):
    # Chunks that wait MPIGNN_BIGBLOCK_AGE big allocations unused are unmapped: after one 512 MiB block, small
    # blocks alone do not keep 512 MiB resident.
    code = LIBC + """
p = libc.malloc(512 << 20); fill(p, 512 << 20, 1); libc.free(p)
held = rss()
for _ in range(20):
    libc.free(libc.malloc(300 << 10))
print(round(held), round(rss()), round(allocator.pages_stats()["pooled_mb"]))
"""
    held, after, pooled = map(int, run(library, code, MPIGNN_BIGBLOCK_AGE="8").split())
    assert held > 500 and after < held - 400 and pooled < 10, (held, after, pooled)


def test_the_cli_preloads_the_pool_and_leaves_nothing_behind(library, tmp_path):
    code = ("from mpignn.launch.allocator import reexec_tuned, policy; reexec_tuned(); import os; "
            "print(policy(), os.environ.get('LD_PRELOAD'), os.environ.get('MPIGNN_MALLOC_PAGES'))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPIGNN_MALLOC") and k != "LD_PRELOAD"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**env, "TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["pages", "None", "None"]  # children do not inherit the preload
    assert list(tmp_path.iterdir()) == []  # the built library's folder is gone
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**env, "MPIGNN_MALLOC": "mapped"})
    assert out.stdout.split()[0] == "mapped", out.stderr
    mine = next((p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6",
                             "/usr/lib64/libm.so.6", "/lib64/libm.so.6") if os.path.exists(p)), None)
    if mine:  # an allocator the user preloads (jemalloc, tcmalloc; here a harmless library) is left alone
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env={**env, "LD_PRELOAD": mine})
        assert out.stdout.split() == ["mapped", mine, "None"], out.stderr


def test_without_a_compiler_the_default_maps_and_pages_is_refused_in_one_line(library, tmp_path):
    assert allocator.build_pages(cc="/nonexistent/cc") is None
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MPIGNN_MALLOC")}, "CC": "/nonexistent/cc"}
    code = "from mpignn.launch.allocator import reexec_tuned, policy; reexec_tuned(); print(policy())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.strip() == "mapped", out.stderr
    out = subprocess.run([sys.executable, "-m", "mpignn.train", "--root", str(tmp_path), "--epochs", "1"],
                         capture_output=True, text=True, timeout=120, env={**env, "MPIGNN_MALLOC": "pages"})
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if "MPIGNN_MALLOC" in line]
    assert len(lines) == 1 and "HINT" in lines[0] and "Traceback" not in out.stderr, out.stderr


def test_the_blocks_benchmark_prints_each_policy(library, capsys):
    # `python -m mpignn.bench.blocks`, shortened: every policy and band has its row, and the pool says how many of
    # its blocks it took in place.
    from mpignn.bench import blocks

    blocks.main(["--steps", "40", "--policies", "heap,pages"])
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("heap", "pages"))]
    assert [(r[0], r[1]) for r in rows] == [(p, b.split()[0]) for p in ("heap", "pages") for b in
                                            ("256-2048", "2048-8192", "8192-32768")], out
    assert all(r[-1] == "-" for r in rows[:3]) and all(0 <= float(r[-1]) <= 1 for r in rows[3:]), out
