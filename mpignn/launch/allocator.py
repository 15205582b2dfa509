"""The process's memory: the malloc policy for training (fast steps, a peak that stays flat over many epochs)
and the readings of resident memory every layer above reports.

Stdlib only (ctypes); of mpignn it imports `errors` alone, and nothing of torch. Process-wide: the training CLI
applies it, a library caller opts in (`runtime.bootstrap(tune_process=True)`). By default (MPIGNN_MALLOC=pages)
the CLI re-executes itself with `bigblocks.c` preloaded: blocks of 256 KiB and more are made of pooled pages that
earlier blocks freed (a flat peak, no page faults once warm); where no C compiler builds it, glibc maps them
(MPIGNN_MALLOC=mapped: a flat peak, slower steps). MPIGNN_MALLOC=steps keeps the training steps' blocks in glibc's
heap (`steps_in_heap`), MPIGNN_MALLOC=heap never unmaps (fast, the peak grows every epoch), MPIGNN_MALLOC=system
leaves malloc alone.
"""
from __future__ import annotations

import contextlib
import os
import platform
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
from typing import Mapping

__all__ = ["MMAP_THRESHOLD", "tune_allocator", "steps_in_heap", "keep_big_blocks", "hugepage_tunables",
           "build_pages", "pages_stats", "policy", "reexec_tuned", "peak_rss_mb", "rss_mb"]

# Blocks at least this large are mmap'd and unmapped on free; smaller ones stay in the heap. Measured on the
# default graph, 2 ranks (`python -m mpignn.bench.soak`, whose `RSS at epoch end` column is the heap's growth):
# with mmap off altogether (mpignn's earlier policy) the heap's free space grew by 30-150 MiB an epoch: the
# step's tensors and arrays, of other sizes every step, no longer fit the holes left between longer-lived small
# blocks, so the heap kept growing. At 4 MiB the growth slowed but did not stop: over 30 epochs the heap grew by
# 38 MiB (mallinfo2: in-use +4 MiB, free space +34 MiB) and the peak by the same, 736 -> 774 MiB (+5.2%). The
# step's blocks of 256 KiB to 4 MiB made those holes (tests/test_allocator.py replays the pattern); mapped, they
# leave none: the heap grew 8 MiB in 16 epochs instead of 28, and the peak starts 30 MiB lower.
MMAP_THRESHOLD = 256 << 10
_TRIM_THRESHOLD = 1 << 30  # freed heap memory is kept (no page faults on reuse); the big blocks are mmap'd
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4
_MMAP_MAX_DEFAULT = 65536  # glibc's own limit on mapped blocks: mapping back on
_REEXEC_MARK = "MPIGNN_MALLOC_REEXEC"
_PAGES_MARK = "MPIGNN_MALLOC_PAGES"  # the preloaded library's path, for the re-executed process to clean up
_MODES = ("", "pages", "mapped", "steps", "heap", "system")  # MPIGNN_MALLOC's values ("": pages where it builds)


def tune_allocator(env: Mapping[str, str] | None = None) -> bool:
    """Set glibc's mmap threshold to MMAP_THRESHOLD (fixed: glibc stops raising it) and keep freed heap memory.

    Mapped blocks give their pages back on free, so nothing in the heap can grow; their fresh pages cost faults
    (transparent huge pages on them, `reexec_with_hugepages`, cut the count), which is why training steps keep
    their blocks in the heap under MPIGNN_MALLOC=steps (`steps_in_heap`). MPIGNN_MALLOC=heap keeps every block
    in the heap. Returns False where this is not glibc, or with MPIGNN_MALLOC=system.

    Raises:
        ConfigError: MPIGNN_MALLOC names no policy.
    """
    env = os.environ if env is None else env
    mode = env.get("MPIGNN_MALLOC", "")
    if mode not in _MODES:
        from mpignn.errors import ConfigError

        raise ConfigError(f"MPIGNN_MALLOC={mode!r} names no malloc policy. HINT: one of "
                          f"{', '.join(m for m in _MODES if m)}, or unset it (pages where a C compiler is found)")
    if mode == "pages" and pages_stats() is None:
        from mpignn.errors import ConfigError

        raise ConfigError("MPIGNN_MALLOC=pages: the page pool is not loaded (python -m mpignn.train builds and "
                          "preloads mpignn/launch/bigblocks.c with a C compiler). HINT: install gcc or set CC, or "
                          "unset MPIGNN_MALLOC")
    if mode == "system":
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    mapped = libc.mallopt(_M_MMAP_MAX, 0) if mode == "heap" else libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    tuned = bool(mapped) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    global _LIBC, _STEPS_IN_HEAP
    _LIBC = libc if tuned and mode != "heap" else None
    _STEPS_IN_HEAP = mode == "steps"
    return tuned


_LIBC = None  # glibc, where `tune_allocator` mapped the big blocks
_STEPS_IN_HEAP = False  # MPIGNN_MALLOC=steps, until `keep_big_blocks` keeps every block


@contextlib.contextmanager
def steps_in_heap():
    """Under MPIGNN_MALLOC=steps: keep the training steps' blocks in the heap, then give the heap's free pages
    back (malloc_trim) and map big blocks again on leaving; elsewhere nothing.

    Mapped blocks cost page faults and zeroed pages every step; a heap kept for good grows without end, most of
    it from evaluation's larger blocks. Here the heap serves the training passes only: faster than mapped
    blocks, but its peak still rose on sbm200k; the page pool is the default (docs/failures.md, "The page
    pool", and `python -m mpignn.bench.soak --malloc heap,default,steps`)."""
    if _LIBC is None or not _STEPS_IN_HEAP:
        yield
        return
    _LIBC.mallopt(_M_MMAP_MAX, 0)
    try:
        yield
    finally:
        _LIBC.mallopt(_M_MMAP_MAX, _MMAP_MAX_DEFAULT)
        _LIBC.malloc_trim(0)


def keep_big_blocks() -> bool:
    """Where `tune_allocator` maps big blocks, keep new ones in the heap from now on: for steps that allocate
    the same blocks every time (full-graph training's one fixed batch), the heap's holes fit the next step's
    blocks exactly, so it stays flat without the page faults of fresh mappings. Returns whether it changed."""
    global _STEPS_IN_HEAP
    _STEPS_IN_HEAP = False  # for good: evaluation's blocks stay in the heap too
    return _LIBC is not None and bool(_LIBC.mallopt(_M_MMAP_MAX, 0))


def _thp_mode(path: str = "/sys/kernel/mm/transparent_hugepage/enabled") -> str:
    """The kernel's transparent huge page mode ("always", "madvise", "never"; "" when unknown)."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except OSError:
        return ""
    return text.partition("[")[2].partition("]")[0]


def hugepage_tunables(env: Mapping[str, str], thp_mode: str) -> str | None:
    """The GLIBC_TUNABLES value that asks glibc to back its mmap'd blocks with huge pages (madvise), or None
    where that cannot help or is not ours to set: MPIGNN_MALLOC=system or heap, huge pages off in the kernel, the
    user's GLIBC_TUNABLES already naming glibc.malloc.hugetlb, or this process already re-executed once."""
    if env.get("MPIGNN_MALLOC", "") in ("system", "heap") or env.get(_REEXEC_MARK):
        return None
    if thp_mode not in ("always", "madvise"):
        return None
    current = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in current:
        return None
    return f"{current}:glibc.malloc.hugetlb=1" if current else "glibc.malloc.hugetlb=1"


def build_pages(cc: str | None = None, source: str | None = None) -> str | None:
    """Compile `bigblocks.c` (or `source`, for benchmarks) into a new private folder; returns the library's path,
    or None where this is not Linux with glibc or no C compiler (`CC`, else cc or gcc) builds it. A fresh build
    each start: no cached code is loaded, and ranks never share a file being written."""
    source = source or os.path.join(os.path.dirname(os.path.abspath(__file__)), "bigblocks.c")
    compiler = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler or not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    folder = tempfile.mkdtemp(prefix="mpignn-malloc-")
    library = os.path.join(folder, "bigblocks.so")
    try:
        subprocess.run([*shlex.split(compiler), "-O2", "-shared", "-fPIC", "-o", library, source, "-lpthread", "-ldl"],
                       check=True, capture_output=True, timeout=120)
    except (OSError, ValueError, subprocess.SubprocessError):
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return library


def pages_stats() -> dict | None:
    """The preloaded page pool's counters (blocks made, chunks reused from the pool, new chunks, MiB pooled, blocks
    taken where a freed run lay), or None where it is not loaded."""
    import ctypes

    try:
        fn = ctypes.CDLL(None).mpignn_bigblocks_stats
    except (OSError, AttributeError):
        return None
    out = (ctypes.c_uint64 * 5)()
    fn(out)
    return {"blocks": out[0], "chunks_reused": out[1], "chunks_new": out[2], "pooled_mb": out[3] / 2**20,
            "in_place": out[4]}


def policy(env: Mapping[str, str] | None = None) -> str:
    """The malloc policy this process runs under (what the run log and benchmarks print)."""
    env = os.environ if env is None else env
    if pages_stats() is not None:
        return "pages"
    return env.get("MPIGNN_MALLOC", "") or "mapped"


def _forget_pages() -> None:
    """In the re-executed process: the library is loaded, so its file goes, and child processes do not inherit
    the preload (its path no longer exists)."""
    library = os.environ.pop(_PAGES_MARK, "")
    if not library:
        return
    rest = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p and p != library]
    if rest:
        os.environ["LD_PRELOAD"] = ":".join(rest)
    else:
        os.environ.pop("LD_PRELOAD", None)
    shutil.rmtree(os.path.dirname(library), ignore_errors=True)


def reexec_tuned() -> None:
    """Re-execute this command line once with the page pool preloaded (MPIGNN_MALLOC=pages, or unset where nothing
    else is preloaded, such as the user's jemalloc; where it builds) and huge pages for glibc's mapped blocks
    (glibc reads its tunables only at start-up). Call it first thing in a CLI's entry point, before MPI or torch
    start: the process keeps its pid, environment and open files, so mpirun, srun and PMI see the same process.
    Returns where nothing is to be done.

    Where the library does not build, the process goes on with glibc's mapped blocks (`tune_allocator` refuses
    an explicit MPIGNN_MALLOC=pages then, inside the run's error handling).
    """
    if os.environ.get(_REEXEC_MARK):
        _forget_pages()
        return
    argv = list(getattr(sys, "orig_argv", []))
    if len(argv) < 2 or not sys.executable or not sys.platform.startswith("linux"):
        return
    mode = os.environ.get("MPIGNN_MALLOC", "")
    env = dict(os.environ)
    tunables = hugepage_tunables(os.environ, _thp_mode())
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    if mode == "pages" or (mode == "" and not os.environ.get("LD_PRELOAD")):  # a preloaded allocator of the user's wins
        library = build_pages()
        if library is not None:
            env["LD_PRELOAD"] = f"{library}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else library
            env[_PAGES_MARK] = library
    if env == os.environ:
        return
    env[_REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], env)


# The allocators a job script may preload, and the settings torch's launcher (torch.backends.xeon.run_cpu) gives.
_PRELOADS = {"jemalloc": ("libjemalloc.so.2", {"MALLOC_CONF": "oversize_threshold:1,background_thread:true,"
                                                               "metadata_thp:auto"}),
             "tcmalloc": ("libtcmalloc_minimal.so.4", {}), "mimalloc": ("libmimalloc.so.2", {})}


def preload_env(name: str) -> dict[str, str] | None:
    """LD_PRELOAD (and the allocator's settings) that load allocator `name` in a new process, or None where the
    library is not installed."""
    import ctypes.util

    library, settings = _PRELOADS[name]
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                   "/usr/local/lib"):
        if os.path.exists(os.path.join(folder, library)):
            return {"LD_PRELOAD": os.path.join(folder, library), **settings}
    found = ctypes.util.find_library(library.split(".so")[0][3:])
    return {"LD_PRELOAD": found, **settings} if found else None


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (MiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def rss_mb() -> float | None:
    """This process's resident memory now (MiB; None where /proc is missing). Unlike the peak, it falls when
    memory is given back: its growth from epoch to epoch is memory kept (objects, or the allocator's free
    space), not one batch larger than the others."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
