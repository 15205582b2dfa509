"""Contents checks of a partition folder: what the kernels, the feature store and the loaders index with,
checked at load time so that a folder whose checksums match its own META.json still cannot steer a kernel out
of bounds. Mapped arrays are scanned in chunks. numpy only: must not import torch, torch-geometric or numba.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mpignn.data.npyio import read_npy_header
from mpignn.errors import PartitionFormatError

__all__ = ["CHUNK", "DTYPES", "check_meta", "check_part", "check_link_arrays", "sha256_and_max"]

CHUNK = 1 << 20  # elements per pass over a big array (8 MiB of int64); tests lower it to exercise the chunks

# The exact dtype (native byte order) of every part file; anything else is refused, not converted.
DTYPES = {**dict.fromkeys(("rowptr", "col", "y", "train_idx", "val_idx", "test_idx", "orig_id", "halo_gid",
                            "halo_deg", "type_rowptr"), np.dtype(np.int64)), "x": np.dtype(np.float32)}


def _fail(where: Any, expected: str, got: str, folder: str | os.PathLike) -> PartitionFormatError:
    return PartitionFormatError(f"{where}: expected {expected}, got {got}. HINT: re-create the folder with python -m "
                                f"mpignn.partition --out {folder} --force")


def sha256_and_max(path: str | os.PathLike, chunk: int = 1 << 22) -> tuple[str, int | None]:
    """(sha256, unsigned max of the elements) in one read; the max is None unless a C-order <i8 .npy. A negative
    id reads as a huge unsigned value, so `max < N` checks [0, N)."""
    digest = hashlib.sha256()
    top, data = None, -1
    with open(path, "rb") as f:
        with contextlib.suppress(ValueError, KeyError, OSError, EOFError):
            shape, fortran, dtype = read_npy_header(f)
            if dtype == np.dtype("<i8") and not fortran and f.tell() % 8 == 0:
                data, top = 8 * int(np.prod(shape, dtype=np.int64)), 0
        head = f.tell() if data >= 0 else 0
        f.seek(0)
        digest.update(f.read(head))
        buf = bytearray(chunk)
        view = memoryview(buf)
        while n := f.readinto(buf):
            digest.update(view[:n])
            take = min(n, max(0, data)) // 8
            if take:
                top = max(top, int(np.frombuffer(buf, dtype=np.uint64, count=take).max()))
                data -= 8 * take
    return digest.hexdigest(), (top if data == 0 else None)


def _check_range(path: Path, a: np.ndarray, lo: int, hi: int, what: str, folder: Path,
                 scanned_max: int | None = None) -> None:
    if lo == 0 and scanned_max is not None and scanned_max < hi:
        return  # the checksum's read found every element in range
    # (v - lo) read unsigned is below hi - lo exactly when v is in range, so one unsigned max per chunk checks
    # both sides without a mask the array's size
    width, flat = np.uint64(hi - lo), a.reshape(-1)
    for start in range(0, len(flat), CHUNK):
        chunk = flat[start:start + CHUNK]
        shifted = (chunk if lo == 0 else chunk - np.int64(lo)).view(np.uint64)
        if len(chunk) and shifted.max() >= width:
            i = int(np.flatnonzero(shifted >= width)[0])
            raise _fail(path, f"{what} in [{lo}, {hi})", f"{int(chunk[i])} at index {start + i}", folder)


def _check_ptr(path: Path, ptr: np.ndarray, end: int, what: str, folder: Path) -> None:
    if ptr[0] != 0 or ptr[-1] != end:
        raise _fail(path, f"{what} from 0 to {end} (the length of col.npy)", f"{int(ptr[0])} .. {int(ptr[-1])}",
                    folder)
    falls = np.flatnonzero(ptr[1:] < ptr[:-1])
    if len(falls):
        i = int(falls[0])
        raise _fail(path, f"{what} never decreasing (monotone)", f"{int(ptr[i])} then {int(ptr[i + 1])} at index {i}",
                    folder)


def check_meta(meta: Any, folder: str | os.PathLike) -> None:
    """Check the numbers of META.json that ownership and type lookups rely on."""
    path = Path(folder) / "META.json"
    try:
        offsets = np.asarray(meta.part_offsets, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        offsets = np.zeros(0, dtype=np.int64)
    if (meta.num_nodes < 1 or len(offsets) != meta.num_parts + 1 or offsets[0] != 0
            or offsets[-1] != meta.num_nodes or (np.diff(offsets) < 0).any()):
        raise _fail(path, f"part_offsets rising from 0 to num_nodes={meta.num_nodes} over {meta.num_parts} parts",
                    f"{list(meta.part_offsets)[:8]}{' ...' if len(offsets) > 8 else ''}", folder)
    if len(meta.parts) != meta.num_parts:
        raise _fail(path, f"{meta.num_parts} entries in parts", str(len(meta.parts)), folder)
    if meta.hetero:
        types = len(meta.hetero["node_types"])
        for p, info in enumerate(meta.parts):
            counts = info.get("type_counts")
            if (not isinstance(counts, list) or len(counts) != types or min(counts, default=0) < 0
                    or sum(counts) != offsets[p + 1] - offsets[p]):
                raise _fail(path, f"parts[{p}].type_counts: {types} counts >= 0 adding up to the part's "
                            f"{int(offsets[p + 1] - offsets[p])} nodes", repr(counts), folder)


def check_part(meta: Any, part_id: int, arrays: Mapping[str, np.ndarray], pdir: str | os.PathLike,
               folder: str | os.PathLike, scanned: Mapping[str, int | None]) -> None:
    """Check one part's arrays against each other and META.json before any kernel reads them.

    `scanned` ({name: max} from `sha256_and_max`) spares the range scan the checksum read already did.
    """
    pdir, folder = Path(pdir), Path(folder)
    lo, hi = int(meta.part_offsets[part_id]), int(meta.part_offsets[part_id + 1])
    n, big_n = hi - lo, int(meta.num_nodes)
    for name, a in arrays.items():
        want = DTYPES[name]
        if a.dtype != want:
            raise _fail(pdir / f"{name}.npy", f"dtype {want.str} ({want.name})", a.dtype.str, folder)
    x, col = arrays["x"], arrays["col"]
    shapes = {"rowptr": (n + 1,), "x": (n, int(meta.num_features)), "y": (n,), "orig_id": (n,),
              "col": (col.size,)}  # size, not len: a 0-d array is refused too
    for name in ("train_idx", "val_idx", "test_idx", "halo_gid"):
        shapes[name] = (arrays[name].size,)
    shapes["halo_deg"] = shapes["halo_gid"]
    for name, shape in shapes.items():
        if arrays[name].shape != shape:
            raise _fail(pdir / f"{name}.npy", f"shape {shape}", str(arrays[name].shape), folder)
    if not x.flags.c_contiguous:
        raise _fail(pdir / "x.npy", "rows in C order", "Fortran order", folder)
    _check_ptr(pdir / "rowptr.npy", arrays["rowptr"], len(col), "rowptr", folder)
    _check_range(pdir / "col.npy", col, 0, big_n, "node ids", folder, scanned.get("col"))
    _check_range(pdir / "orig_id.npy", arrays["orig_id"], 0, big_n, "original ids", folder, scanned.get("orig_id"))
    classes = int(meta.num_classes)
    y = arrays["y"]
    _check_range(pdir / "y.npy", y, -1, classes, "labels (-1: unlabelled)", folder)
    for name in ("train_idx", "val_idx", "test_idx"):
        ids = arrays[name]
        _check_range(pdir / f"{name}.npy", ids, lo, hi, f"ids owned by part {part_id}", folder)
        if len(ids) and y[ids - lo].min() < 0:
            i = int(np.flatnonzero(y[ids - lo] < 0)[0])
            raise _fail(pdir / f"{name}.npy", f"labelled nodes (y.npy in [0, {classes}))",
                        f"node {int(ids[i])} with label {int(y[ids[i] - lo])}", folder)
    gid = arrays["halo_gid"]
    _check_range(pdir / "halo_gid.npy", gid, 0, big_n, "node ids", folder, scanned.get("halo_gid"))
    rises = np.flatnonzero(gid[1:] <= gid[:-1])
    if len(rises):
        i = int(rises[0])
        raise _fail(pdir / "halo_gid.npy", "ids sorted and unique", f"{int(gid[i])} then {int(gid[i + 1])}", folder)
    a, b = np.searchsorted(gid, [lo, hi])
    if b > a:
        raise _fail(pdir / "halo_gid.npy", f"only other parts' ids (outside [{lo}, {hi}))", f"own id {int(gid[a])}",
                    folder)
    _check_range(pdir / "halo_deg.npy", arrays["halo_deg"], 1, 2**62, "edge counts", folder)
    if "type_rowptr" in arrays and meta.hetero:
        _check_types(meta, part_id, arrays, pdir, folder)


def _check_types(meta: Any, part_id: int, arrays: Mapping[str, np.ndarray], pdir: Path, folder: Path) -> None:
    """type_rowptr's runs consistent with rowptr and with each edge type's source and target node types."""
    from mpignn.data.hetero import type_of

    path = pdir / "type_rowptr.npy"
    rowptr, tptr, col = arrays["rowptr"], arrays["type_rowptr"], arrays["col"]
    h = meta.hetero
    te, n = len(h["edge_types"]), len(rowptr) - 1
    if tptr.shape != (n * te + 1,):
        raise _fail(path, f"shape ({n * te + 1},) (rows x {te} edge types + 1)", str(tptr.shape), folder)
    _check_ptr(path, tptr, len(col), "type_rowptr", folder)
    if not np.array_equal(tptr[::te], rowptr):
        v = int(np.flatnonzero(tptr[::te] != rowptr)[0])
        raise _fail(path, f"row {v}'s runs to start at rowptr[{v}]={int(rowptr[v])}", str(int(tptr[v * te])), folder)
    names = list(h["node_types"])
    src = np.array([names.index(e[0]) for e in h["edge_types"]], dtype=np.int64)
    dst = np.array([names.index(e[2]) for e in h["edge_types"]], dtype=np.int64)
    counts = np.asarray(meta.parts[part_id]["type_counts"], dtype=np.int64)
    row_type = np.repeat(np.arange(len(counts)), counts)
    runs = np.diff(tptr).reshape(n, te)
    wrong = (runs > 0) & (row_type[:, None] != dst[None, :])
    if wrong.any():
        v, e = (int(i) for i in np.argwhere(wrong)[0])
        raise _fail(path, f"no edges of type {'__'.join(h['edge_types'][e])} into row {v} (a {names[row_type[v]]})",
                    f"{int(runs[v, e])}", folder)
    starts, kinds = meta.type_blocks()
    # rows in chunks of about CHUNK edges (one row's edges at least): the per-edge arrays stay bounded
    cuts = np.unique(np.append(np.searchsorted(rowptr, np.arange(0, len(col), CHUNK), side="right") - 1, n))
    for r0, r1 in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        e0 = int(tptr[r0 * te])
        etype = np.repeat(np.tile(np.arange(te, dtype=np.int32), r1 - r0), np.diff(tptr[r0 * te:r1 * te + 1]))
        bad = np.flatnonzero(type_of(np.asarray(col[e0:e0 + len(etype)]), starts, kinds) != src[etype])
        if len(bad):
            i = int(bad[0])
            raise _fail(pdir / "col.npy", f"sources of type {h['edge_types'][etype[i]][0]} in the "
                        f"{'__'.join(h['edge_types'][etype[i]])} runs", f"node {int(col[e0 + i])} at index {e0 + i}",
                        folder)


def check_link_arrays(links: Mapping[str, np.ndarray], where: str | os.PathLike, num_nodes: int,
                      folder: str | os.PathLike) -> None:
    """Check held-out link arrays: int64, [2, k] pairs and [k, K] tails, every id in [0, num_nodes)."""
    where = Path(where)
    for split in ("val", "test"):
        k = None
        for kind in ("pos", "neg", "neg_tails"):
            name = f"{split}_{kind}"
            a, path = links[name], where / f"{name}.npy"
            if a.dtype != np.int64:
                raise _fail(path, "dtype <i8 (int64)", a.dtype.str, folder)
            if kind == "neg_tails":
                ok = a.ndim == 2 and a.shape[0] == k
                want = f"shape ({k}, K): one row of tails per positive"
            else:
                ok = a.ndim == 2 and a.shape[0] == 2 and (k is None or a.shape[1] == k)
                want = f"shape (2, {'k' if k is None else k}): (source, target) pairs, one per positive"
            if not ok:
                raise _fail(path, want, str(a.shape), folder)
            k = a.shape[1] if k is None else k
            _check_range(path, a, 0, num_nodes, "node ids", folder)
