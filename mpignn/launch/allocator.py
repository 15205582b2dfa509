"""The process's memory: which malloc serves it, glibc's tuned for a flat peak over many epochs, and the resident
memory readings (docs/failures.md, "Memory over long runs"). A faster allocator is the job script's `LD_PRELOAD`.
"""
from __future__ import annotations

import os
import resource
import sys
from typing import Mapping

__all__ = ["MMAP_THRESHOLD", "prefer_huge_pages", "tune_allocator", "keep_big_blocks", "preloaded", "policy",
           "preload_env", "peak_rss_mb", "rss_mb"]

# Blocks at least this large are mmap'd and unmapped on free; smaller ones stay in the heap. Why this size:
# docs/failures.md, "Memory over long runs" (tests/test_allocator.py replays the pattern).
MMAP_THRESHOLD = 256 << 10
_TRIM_THRESHOLD = 1 << 30  # freed heap memory is kept (no page faults on reuse); the big blocks are mmap'd
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4
_MODES = ("", "heap", "system")  # MPIGNN_MALLOC's values ("": big blocks mapped)
_GONE = ("pages", "mapped", "steps")  # earlier values: refused with the way that replaces them

# The allocators a job script may preload, and the settings torch's launcher (torch.backends.xeon.run_cpu) gives.
PRELOADS = {"jemalloc": ("libjemalloc.so.2", {"MALLOC_CONF": "oversize_threshold:1,background_thread:true,"
                                                              "metadata_thp:auto"}),
            "tcmalloc": ("libtcmalloc_minimal.so.4", {}), "mimalloc": ("libmimalloc.so.2", {})}


def preloaded(maps: str = "/proc/self/maps") -> str:
    """Return the allocator preloaded into this process (a `PRELOADS` name), or "" for glibc's (or not Linux)."""
    try:
        with open(maps, encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    return next((name for name in PRELOADS if f"/lib{name}" in text), "")


def prefer_huge_pages() -> bool:
    """Where glibc will map the big blocks, set torch's `THP_MEM_ALLOC_ENABLE` (unless set): its blocks of 2 MiB
    and more then fault in a huge page at a time, not 4 KiB, which takes most of the mapped blocks' price.
    torch reads the variable at its first allocation (importing torch_geometric allocates): call this first.
    Returns whether torch will ask for huge pages."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii") as f:
            offered = "[never]" not in f.read()
    except OSError:
        offered = False
    if offered and os.environ.get("MPIGNN_MALLOC", "") == "" and not preloaded():
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    return os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"


def tune_allocator(env: Mapping[str, str] | None = None) -> bool:
    """Set glibc's mmap threshold to MMAP_THRESHOLD (fixed: glibc stops raising it) and keep freed heap memory.

    Mapped blocks give their pages back on free, so the heap cannot grow; the price is page faults, which a
    preloaded allocator avoids. Returns False where malloc is not glibc's, or with MPIGNN_MALLOC=system; raises
    ConfigError where MPIGNN_MALLOC names no policy.
    """
    env = os.environ if env is None else env
    mode = env.get("MPIGNN_MALLOC", "")
    if mode not in _MODES:
        from mpignn.errors import ConfigError

        gone = (" (the page pool and the policies beside it are gone: a preloaded allocator replaces them, "
                "docs/failures.md 'Memory over long runs')") if mode in _GONE else ""
        raise ConfigError(f"MPIGNN_MALLOC={mode!r} names no malloc policy{gone}. HINT: unset it (big blocks "
                          "mapped), heap or system; for faster steps preload tcmalloc (LD_PRELOAD, jobs/*.sbatch)")
    if mode == "system" or preloaded():
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    mapped = libc.mallopt(_M_MMAP_MAX, 0) if mode == "heap" else libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    tuned = bool(mapped) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    global _LIBC
    _LIBC = libc if tuned and mode != "heap" else None
    return tuned


_LIBC = None  # glibc, where `tune_allocator` mapped the big blocks


def keep_big_blocks() -> bool:
    """Keep big blocks in the heap from now on; return whether that changed anything.

    For steps that allocate the same blocks every time (full-graph training), the holes fit the next step's
    blocks exactly: a flat heap without the page faults of fresh mappings."""
    return _LIBC is not None and bool(_LIBC.mallopt(_M_MMAP_MAX, 0))


def policy(env: Mapping[str, str] | None = None) -> str:
    """Return the malloc in force, in words (what the run log and benchmarks print)."""
    env = os.environ if env is None else env
    name = preloaded()
    if name:
        return f"{name} (preloaded)"
    mode = env.get("MPIGNN_MALLOC", "")
    return {"heap": "glibc, every block in the heap (MPIGNN_MALLOC=heap)",
            "system": "glibc's defaults (MPIGNN_MALLOC=system)"}.get(
        mode, "glibc, blocks of 256 KiB and more mapped" + (", torch's in huge pages" if env.get(
            "THP_MEM_ALLOC_ENABLE") == "1" else "") + " (preload tcmalloc for faster steps)")


def preload_env(name: str) -> dict[str, str] | None:
    """Return the LD_PRELOAD (and settings) that load allocator `name` in a new process, or None if absent."""
    import ctypes.util

    library, settings = PRELOADS[name]
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
    """Return this process's resident MiB now (None without /proc). Unlike the peak it falls when memory is
    given back, so its growth is memory kept, not one larger batch."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
