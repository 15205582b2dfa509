"""The training process's malloc: a peak that stays flat over epochs (issue: 60-150 MiB more every epoch), a
preloaded allocator left alone and named, nothing compiled or re-executed."""
import os
import subprocess
import sys

import pytest

from _mpirun import run_cli_here
from mpignn.errors import ConfigError
from mpignn.launch import allocator
from mpignn.bench._common import run_train
from mpignn.bench.soak import slope


# glibc's malloc, free and mallinfo2 from ctypes, for the scripts below (each runs in a fresh process)
LIBC = """
import ctypes, random
from mpignn.errors import ConfigError
from mpignn.launch import allocator
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
def mapped(size):  # whether malloc maps a block of `size` (mallinfo2 counts those in hblkhd)
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    grew = libc.mallinfo2().hblkhd > before
    libc.free(block)
    return grew
"""


MAPS_BIG_BLOCKS = LIBC + """
assert allocator.tune_allocator({"MPIGNN_MALLOC": "system"}) is False
assert allocator.tune_allocator({}) is True
before = libc.mallinfo2().hblkhd
block = libc.malloc(2 * allocator.MMAP_THRESHOLD)
assert libc.mallinfo2().hblkhd >= before + 2 * allocator.MMAP_THRESHOLD, (before, libc.mallinfo2().hblkhd)
libc.free(block)
print("ok")
"""


def test_tune_allocator_maps_big_blocks_and_leaves_malloc_alone_when_asked():
    # A block above the threshold is mmap'd (glibc counts those in mallinfo2's hblkhd), so freeing it gives its
    # pages back instead of leaving a hole in the heap that later, larger blocks cannot use. In a fresh process:
    # what this one's earlier tests did to malloc (a pytest-xdist worker's included) is not the policy's doing.
    out = subprocess.run([sys.executable, "-c", MAPS_BIG_BLOCKS], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "MPIGNN_MALLOC"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


FRAGMENTING_STEPS = LIBC + """
assert allocator.tune_allocator({})
rng, kept, start = random.Random(0), [], libc.mallinfo2().arena
for step in range(300):
    blocks = [libc.malloc(rng.randrange(256 << 10, 4 << 20)) for _ in range(6)]
    kept.append(libc.malloc(4096))  # outlives its step, like an object cached during it
    for block in blocks:
        libc.free(block)
print((libc.mallinfo2().arena - start) / 2**20)
"""


def test_step_sized_blocks_leave_no_holes_that_grow_the_heap():
    # A training step's transient tensors and arrays, 256 KiB to 4 MiB and of other sizes every step, freed
    # around a few small blocks that outlive the step: in the heap (the 4 MiB threshold) the holes they left
    # were too small for the next steps' blocks, and the heap grew by 22 MiB here for 1.2 MiB kept (on the
    # default run: 38 MiB over 30 epochs, the whole growth of the peak). Mapped, they leave no holes.
    out = subprocess.run([sys.executable, "-c", FRAGMENTING_STEPS], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "MPIGNN_MALLOC"})
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 4.0, f"the heap grew {float(out.stdout):.1f} MiB for 1.2 MiB of kept blocks"


@pytest.mark.mpi
@pytest.mark.slow
def test_the_default_run_keeps_a_flat_peak_and_learns(tmp_path):
    # The default graph and flags on 2 ranks: before the mapped blocks each rank's peak rose 30-150 MiB an epoch
    # here. Independent batches (what auto picks on this graph and VM) and 6 steps an epoch keep the test short,
    # with evaluation every epoch (its blocks are the largest); at 6 steps glibc's defaults (MPIGNN_MALLOC=system)
    # still raise the peak 87 MiB an epoch over the second half here (2026-12-05), failing both peak assertions.
    # One run for what two asserted (this one and the 3-rank soak test): the peak within 5% after epoch 2, under
    # 3 MiB an epoch over the second half, learning. The heap itself still drifts about 1 MiB an epoch
    # (docs/failures.md; 1.07 seen once under the suite's load), so the bound sits above that drift and far under
    # the 30-150 MiB an epoch it guards against.
    recs = run_train(2, ["--root", str(tmp_path), "--epochs", "6", "--minibatch", "independent", "--max-steps", "6",
                         "--patience", "0"], timeout=600)
    peaks = [r["peak_rss_mb"] for r in recs]
    assert len(peaks) == 6
    assert max(peaks[3:]) <= 1.05 * peaks[2], peaks
    assert slope(peaks) < 3.0, peaks  # MiB per epoch over the second half
    assert recs[-1]["test_acc"] > 0.6


KEEP_AFTER_FULL = LIBC + """
assert not allocator.keep_big_blocks()  # untuned: malloc is not ours to change
assert allocator.tune_allocator({})
assert mapped(4 * allocator.MMAP_THRESHOLD)
assert allocator.keep_big_blocks()
assert not mapped(4 * allocator.MMAP_THRESHOLD)
print("ok")
"""


def test_full_graph_steps_keep_big_blocks_in_the_heap():
    # Full-graph training allocates the same blocks every epoch: in the heap the next epoch reuses them (a flat
    # peak) without faulting fresh mappings in (docs/training.md, the full-graph table).
    out = subprocess.run([sys.executable, "-c", KEEP_AFTER_FULL], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "MPIGNN_MALLOC"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_torch_is_asked_for_huge_pages_only_where_glibc_maps_the_big_blocks(monkeypatch):
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
            offered = "[never]" not in f.read()
    except OSError:
        offered = False
    monkeypatch.delenv("MPIGNN_MALLOC", raising=False)
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    assert allocator.prefer_huge_pages() is offered
    assert os.environ.get("THP_MEM_ALLOC_ENABLE") == ("1" if offered else None)
    assert ("torch's in huge pages" in allocator.policy()) is offered
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")  # the user's choice stands
    assert allocator.prefer_huge_pages() is False and os.environ["THP_MEM_ALLOC_ENABLE"] == "0"
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE")
    monkeypatch.setenv("MPIGNN_MALLOC", "heap")  # the heap keeps its pages: nothing to fault in again
    assert allocator.prefer_huge_pages() is False and "THP_MEM_ALLOC_ENABLE" not in os.environ


def test_an_unknown_or_removed_policy_is_refused_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="MPIGNN_MALLOC='heep' names no malloc policy. HINT: unset it"):
        allocator.tune_allocator({"MPIGNN_MALLOC": "heep"})
    with pytest.raises(ConfigError, match="MPIGNN_MALLOC='pages' names no malloc policy .the page pool .* HINT: "
                                          ".* preload tcmalloc"):
        allocator.tune_allocator({"MPIGNN_MALLOC": "pages"})
    monkeypatch.setenv("MPIGNN_MALLOC", "heep")  # the training CLI, which tunes malloc: refused before it does
    code, out = run_cli_here("mpignn.train", ["--root", tmp_path, "--epochs", "1"])
    assert code != 0
    lines = [line for line in out.splitlines() if "MPIGNN_MALLOC" in line]
    assert len(lines) == 1 and "HINT" in lines[0] and "Traceback" not in out, out
    assert list(tmp_path.iterdir()) == []  # refused before any data was prepared


PRELOADED = """
from mpignn.launch import allocator
print(allocator.preloaded(), allocator.tune_allocator({}), allocator.keep_big_blocks(), allocator.policy(), sep="|")
"""


@pytest.mark.parametrize("name", sorted(allocator.PRELOADS))
def test_a_preloaded_allocator_is_named_and_left_alone(name):
    env = allocator.preload_env(name)
    if env is None:
        pytest.skip(f"lib{name} is not installed (apt-get install {allocator.PRELOADS[name][0]})")
    out = subprocess.run([sys.executable, "-c", PRELOADED], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split("|") == [name, "False", "False", f"{name} (preloaded)"]


def test_glibc_is_told_from_a_preload_by_the_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert allocator.preloaded(str(maps)) == ""
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10\n")
    assert allocator.preloaded(str(maps)) == "tcmalloc"
    assert allocator.preloaded(str(tmp_path / "none")) == ""


class _Hosts:
    def __init__(self, seen):
        self.seen = seen

    def allgather(self, _):
        return self.seen


def test_the_malloc_in_force_is_logged_once_or_per_host_where_hosts_differ(caplog):
    from mpignn.launch.bootstrap import log_malloc

    caplog.set_level("INFO", logger="mpignn.launch.bootstrap")
    log_malloc(_Hosts([("host1", "jemalloc (preloaded)")] * 2), 0, "host1")
    assert [r.getMessage() for r in caplog.records] == [
        "malloc: jemalloc (preloaded) (docs/failures.md, 'Memory over long runs')"]
    caplog.clear()
    log_malloc(_Hosts([("host1", "jemalloc (preloaded)"), ("host2", "glibc"), ("host3", "glibc")]), 0, "host1")
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("malloc differs between hosts: host1: jemalloc (preloaded); host2, host3: glibc. HINT:")
    caplog.clear()
    log_malloc(_Hosts([("host1", "a"), ("host2", "b")]), 1, "host2")
    assert not caplog.records  # rank 0 says it
