"""The training process's malloc policy: a peak that stays flat over epochs (issue: 60-150 MiB more every epoch)."""
import ctypes
import os
import subprocess
import sys

import pytest

from mpignn import allocator
from mpignn.bench._common import run_train


def test_huge_pages_are_asked_for_once_and_never_over_the_users_choice():
    assert allocator.hugepage_tunables({}, "madvise") == "glibc.malloc.hugetlb=1"
    assert allocator.hugepage_tunables({}, "always") == "glibc.malloc.hugetlb=1"
    kept = allocator.hugepage_tunables({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, "madvise")
    assert kept == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert allocator.hugepage_tunables({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "madvise") is None
    assert allocator.hugepage_tunables({}, "never") is None and allocator.hugepage_tunables({}, "") is None
    assert allocator.hugepage_tunables({"MPIGNN_MALLOC": "system"}, "madvise") is None
    assert allocator.hugepage_tunables({"MPIGNN_MALLOC": "heap"}, "madvise") is None
    assert allocator.hugepage_tunables({"MPIGNN_MALLOC_REEXEC": "1"}, "madvise") is None  # no exec loop


def test_the_cli_re_executes_itself_once_with_huge_pages():
    code = ("from mpignn.allocator import reexec_with_hugepages as r; r(); import os; "
            "print(os.environ.get('GLIBC_TUNABLES'), os.environ.get('MPIGNN_MALLOC_REEXEC'))")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "MPIGNN_MALLOC", "MPIGNN_MALLOC_REEXEC")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    if allocator._thp_mode() in ("always", "madvise"):
        assert out.stdout.split() == ["glibc.malloc.hugetlb=1", "1"]
    else:
        assert out.stdout.split() == ["None", "None"]


def test_tune_allocator_maps_big_blocks_and_leaves_malloc_alone_when_asked():
    assert allocator.tune_allocator({"MPIGNN_MALLOC": "system"}) is False
    assert allocator.tune_allocator({}) is True
    # A block above the threshold is mmap'd (glibc counts those in mallinfo2's hblkhd), so freeing it gives its
    # pages back instead of leaving a hole in the heap that later, larger blocks cannot use.

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(2 * allocator.MMAP_THRESHOLD)
    try:
        assert libc.mallinfo2().hblkhd >= before + 2 * allocator.MMAP_THRESHOLD
    finally:
        libc.free(block)


@pytest.mark.mpi
@pytest.mark.slow
def test_default_two_rank_run_peak_stays_flat(tmp_path):
    # The default graph and flags: before the fix each rank's peak rose 30-150 MiB an epoch here.
    recs = run_train(2, ["--root", str(tmp_path), "--epochs", "6"], timeout=600)
    peaks = [r["peak_rss_mb"] for r in recs]
    assert len(peaks) == 6
    assert max(peaks[3:]) <= 1.05 * peaks[2], peaks
