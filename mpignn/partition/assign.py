"""Node-to-part assignment: METIS (pymetis's, through ctypes) with balanced nodes and training nodes, KaMinPar
(shared-memory parallel, balanced nodes; in a child process), or a random baseline. Neither holds the GIL while
it cuts. numpy only; pymetis and kaminpar are imported inside the functions that call them.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mpignn.config.choices import DEFAULT_METHOD, PARTITION_METHODS as METHODS  # auto: default_method()
from mpignn.data.graph import GraphData, symmetrized
from mpignn.data.links import LinkSplit, split_links
from mpignn.data.npyio import read_rows, release_pages, rows_per_chunk
from mpignn.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["assign_parts", "split_and_assign", "METHODS", "DEFAULT_METHOD", "default_method", "write_parhip"]


def default_method() -> str:
    """What `auto` resolves to here."""
    try:
        import kaminpar  # noqa: F401
    except ImportError:
        return "metis"
    return "kaminpar"


def random_parts(num_nodes: int, num_parts: int, seed: int) -> np.ndarray:
    """Exactly balanced random parts: a seeded permutation cut in `num_parts` runs (the first ones one longer)."""
    parts = np.empty(num_nodes, dtype=np.int64)
    for p, ids in enumerate(np.array_split(np.random.default_rng(seed).permutation(num_nodes), num_parts)):
        parts[ids] = p
    return parts


def _undirected(graph: GraphData) -> tuple[np.ndarray, np.ndarray]:
    """METIS and KaMinPar need an undirected graph without self loops (no copy when it already is one)."""
    rowptr, col = symmetrized(np.asarray(graph.rowptr), graph.col)
    release_pages(graph.col)  # symmetrising read a mapped col through the map: let those pages go
    return rowptr, col


def metis_parts(graph: GraphData, num_parts: int, seed: int) -> np.ndarray:
    """METIS balancing nodes and training nodes, so each part gets a fair share of graph and work."""
    try:
        import pymetis
    except ImportError:
        raise ConfigError("--method metis needs pymetis; it is not installed. HINT: pip install pymetis, or "
                          "use --method kaminpar (pip install kaminpar) or --method random") from None
    if num_parts == 1:
        return np.zeros(graph.num_nodes, dtype=np.int64)
    idx = pymetis.zero_copy_dtype()
    rowptr, col = _undirected(graph)
    is_train = np.zeros(graph.num_nodes, dtype=idx)
    is_train[graph.train_idx] = 1
    vweights = None  # one constraint (nodes), or two (nodes, training nodes) where each part can get some
    if is_train.sum() >= num_parts:
        vweights = np.stack([np.ones(graph.num_nodes, dtype=idx), is_train], axis=1)
    # No copy where the CSR is already contiguous idx_t (int64 where METIS is 64-bit); ctypes passes bare pointers.
    rowptr, col = np.ascontiguousarray(rowptr, dtype=idx), np.ascontiguousarray(col, dtype=idx)
    parts = _part_graph(rowptr, col, vweights, num_parts, seed)
    sizes = np.bincount(parts, minlength=num_parts)
    if vweights is not None and (sizes.min() == 0 or sizes.max() > 1.1 * sizes.mean()):
        # few training nodes can leave METIS's two-constraint split with an empty part
        log.info("METIS with training nodes as a second constraint gave parts of %d to %d nodes: cutting again "
                 "on nodes alone", sizes.min(), sizes.max())
        parts = _part_graph(rowptr, col, None, num_parts, seed)
    del rowptr, col
    release_pages(graph.col)
    return parts.astype(np.int64)


_METIS_NOPTIONS = 40  # metis.h (METIS 5)


def _part_graph(rowptr: np.ndarray, col: np.ndarray, vweights: np.ndarray | None, num_parts: int,
                seed: int) -> np.ndarray:
    """METIS as pymetis.part_graph calls it (recursive bisection up to 8 parts, k-way beyond), but through ctypes:

    - ctypes lets go of Python's lock while METIS runs; pymetis holds it, so for the seconds to minutes of a large
      graph this rank's watchdog could not answer a ping and the waiting ranks took it for gone;
    - METIS gets one constraint per weight column: pymetis passes one whatever `vweights` holds, so the training
      nodes were not balanced (up to 1.5x the mean on Cora in 8 parts; tests/test_partition.py).
    """
    import ctypes

    from pymetis import _internal

    lib = ctypes.CDLL(_internal.__file__)  # already loaded: the METIS that pymetis bundles, or links
    kind = "METIS_PartGraphRecursive" if num_parts <= 8 else "METIS_PartGraphKway"
    if not all(hasattr(lib, name) for name in (kind, "METIS_SetDefaultOptions")):
        raise ConfigError(f"--method metis calls {kind} in pymetis ({_internal.__file__}), which does not export "
                          "it. HINT: pip install --force-reinstall pymetis (PyPI's wheels bundle METIS), or use "
                          "--method kaminpar or --method random")
    idx = rowptr.dtype
    options = np.empty(_METIS_NOPTIONS, dtype=idx)
    lib.METIS_SetDefaultOptions(ctypes.c_void_p(options.ctypes.data))
    options[_internal.options_indices.SEED] = seed
    n = len(rowptr) - 1
    parts, cut = np.empty(n, dtype=idx), np.zeros(1, dtype=idx)
    weights = None if vweights is None else np.ascontiguousarray(vweights, dtype=idx)
    nvtxs, ncon, nparts = (np.array([v], dtype=idx) for v in (n, 1 if weights is None else weights.shape[1],
                                                              num_parts))
    args = [nvtxs, ncon, rowptr, col, weights, None, None, nparts, None, None, options, cut, parts]  # METIS's order
    status = getattr(lib, kind)(*(ctypes.c_void_p(None if a is None else a.ctypes.data) for a in args))
    if status != 1:  # METIS_OK
        reason = {-2: "bad input. HINT: --method kaminpar or --method random",
                  -3: "out of memory. HINT: --method kaminpar (leaner) or a node with more memory",
                  -4: "METIS_ERROR: an internal error, or a SIGTERM or SIGABRT METIS caught while it ran. HINT: "
                      "was the job being stopped? Otherwise --method kaminpar"}.get(status, f"error {status}")
        raise ConfigError(f"expected METIS to partition {n} nodes into {num_parts} parts; got {reason}")
    return parts


KAMINPAR_IMBALANCE = 0.01
"""Largest part at most 1% above the average: KaMinPar fills whatever imbalance it is given (docs/benchmarks.md)."""


def write_parhip(path: str | os.PathLike, rowptr: np.ndarray, col: np.ndarray) -> None:
    """Write an undirected CSR (both directions present, no self loops) as a ParHIP binary graph file
    (KaMinPar's and ParHIP's input), in chunks.

        header   uint64 version, n, m (m counts both directions of each edge)
        offsets  uint64 [n + 1]: byte offset in the file of each node's first neighbour
        adjacency  uint32 [m] node ids (uint64 when n >= 2^31)

    version's bits (lowest first): no edge weights, no node weights, 32-bit edge ids, 32-bit node ids, 32-bit
    node weights, 32-bit edge weights.
    """
    n, m = len(rowptr) - 1, int(rowptr[-1])
    small = n < 2**31
    ids = np.uint32 if small else np.uint64
    version = 1 | 2 | (8 if small else 0) | 16 | 32
    header = np.array([version, n, m], dtype=np.uint64)
    base = header.nbytes + (n + 1) * 8
    step = rows_per_chunk(8)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for lo in range(0, n + 1, step):
            f.write((base + np.asarray(rowptr[lo:lo + step], dtype=np.uint64) * np.dtype(ids).itemsize).tobytes())
        for lo in range(0, m, step):
            f.write(read_rows(col, lo, min(m, lo + step)).astype(ids).tobytes())


_DIE_WITH_PARENT = """
import ctypes, os, signal, sys
parent = int(sys.argv.pop())
if sys.platform.startswith("linux"):  # PR_SET_PDEATHSIG: a rank killed by SIGKILL takes its cut with it
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    if os.getppid() != parent:  # it died before that line
        sys.exit(1)
"""  # the start of the child's script; its last argument is the parent's pid
_KAMINPAR_CHILD = """
import sys
import kaminpar
import numpy as np
path, out, seed, threads, num_parts, imbalance = sys.argv[1:]
graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP)
kaminpar.reseed(int(seed))
solver = kaminpar.KaMinPar(int(threads), kaminpar.fast_context())
np.save(out, np.asarray(solver.compute_partition(graph, int(num_parts), float(imbalance)), dtype=np.int64))
"""  # the child process of `kaminpar_parts`: numpy and kaminpar only, so it starts in 0.2 s


def kaminpar_parts(graph: GraphData, num_parts: int, seed: int, workdir: str | os.PathLike | None = None,
                   threads: int = 1) -> np.ndarray:
    """KaMinPar's fast configuration on node counts (it cuts about as well as the default in less time and
    memory, docs/benchmarks.md). Its binding reads files only, so the CSR goes through a ParHIP file in `workdir`,
    and holds the GIL for the whole call, so it runs in a child process: this rank's watchdog thread answers pings
    meanwhile (docs/node-local.md, "A link that fails").

    Only `threads=1` gives the same parts for a seed, so hosts partitioning independently must use it.
    """
    try:
        import kaminpar  # noqa: F401  (the child imports it; a missing package is named here)
    except ImportError:
        raise ConfigError("--method kaminpar needs the kaminpar package; it is not installed. HINT: pip install "
                          "kaminpar (or pip install mpignn[kaminpar]), or use --method metis") from None
    if num_parts == 1:
        return np.zeros(graph.num_nodes, dtype=np.int64)
    rowptr, col = _undirected(graph)
    threads = threads if threads > 0 else len(os.sched_getaffinity(0))
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir, prefix=".mpignn-parhip-") as tmp:
        path, out = Path(tmp) / "graph.parhip", Path(tmp) / "parts.npy"
        write_parhip(path, rowptr, col)
        del rowptr, col
        args = [str(a) for a in (path, out, seed, threads, num_parts, KAMINPAR_IMBALANCE, os.getpid())]
        child = subprocess.Popen([sys.executable, "-c", _DIE_WITH_PARENT + _KAMINPAR_CHILD, *args],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            err = child.communicate()[1].decode(errors="replace").strip()
        finally:
            if child.poll() is None:  # this rank is being stopped: the cut must not outlive it
                child.kill()
                child.wait()
        if child.returncode != 0:
            last = err.splitlines()[-1] if err else f"exit code {child.returncode}"
            if child.returncode < 0:
                last = f"killed by {signal.Signals(-child.returncode).name} (the out-of-memory killer sends SIGKILL)"
            raise ConfigError(f"expected KaMinPar to cut {graph.num_nodes} nodes into {num_parts} parts; got: "
                              f"{last}. HINT: --method metis")
        return np.load(out, allow_pickle=False)


def assign_parts(graph: GraphData, num_parts: int, method: str, seed: int,
                 workdir: str | os.PathLike | None = None, threads: int = 1) -> np.ndarray:
    """Part id of every node; `threads` (0: every core this process may use) for kaminpar."""
    if method == DEFAULT_METHOD:
        method = default_method()
    if method not in METHODS:
        raise ConfigError(f"--method must be one of {', '.join((DEFAULT_METHOD, *METHODS))}; got '{method}'. "
                          "HINT: --method auto")
    if not 1 <= num_parts <= graph.num_nodes:
        raise ConfigError(f"--num-parts must be between 1 and the node count {graph.num_nodes}; got {num_parts}. "
                          "HINT: use fewer parts (ranks) than nodes")
    if method == "random":
        return random_parts(graph.num_nodes, num_parts, seed)
    if method == "kaminpar":
        return kaminpar_parts(graph, num_parts, seed, workdir, threads)
    return metis_parts(graph, num_parts, seed)


def split_and_assign(graph: GraphData, num_parts: int, method: str, seed: int, links: dict | None = None,
                     workdir: str | os.PathLike | None = None,
                     threads: int = 1) -> tuple[GraphData, np.ndarray, LinkSplit | None, str]:
    """(the graph without the edges `links` holds out, each node's part, the held-out edges or None, the
    method that ran: `auto` resolved, as META.json records it)."""
    if method == DEFAULT_METHOD:
        method = default_method()
    held_out = None
    if links is not None:
        graph, held_out = split_links(graph, links["val"], links["test"], links["seed"], links["num_tails"])
    return graph, assign_parts(graph, num_parts, method, seed, workdir=workdir, threads=threads), held_out, method
