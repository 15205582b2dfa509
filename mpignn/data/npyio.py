"""Streaming npy files: write an array chunk by chunk, read row ranges without keeping them mapped.
numpy only, never pickle. Reading through a memory map keeps every touched page resident until unmapped, so
`read_rows` uses plain file reads: a pass over a big feature file costs one chunk of memory.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from mpignn.errors import DatasetError

__all__ = ["NpyWriter", "read_rows", "iter_chunks", "rows_per_chunk", "read_npy_header", "release_pages",
           "refuse_beyond_memory"]

CHUNK_BYTES = 64 << 20
"""Bytes per chunk of the streaming passes: large enough for full-speed I/O, small beside any graph."""


def rows_per_chunk(row_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    return max(1, chunk_bytes // max(1, row_bytes))


def read_npy_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of the .npy header at `f`'s position; leaves `f` at the array data. Format
    3.0 is a ValueError: it only adds utf-8 field names, which no key here has."""
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f"npy format version {version}")
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(f)
    return tuple(shape), fortran, dtype


class NpyWriter:
    """Write an .npy file of a known shape and dtype in row chunks, appended in order; `close` checks the count."""

    def __init__(self, path: str | os.PathLike, shape: tuple[int, ...], dtype: np.dtype | type) -> None:
        self.path = Path(path)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.rows = 0
        self._file = open(self.path, "wb")
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
        np.lib.format.write_array_header_2_0(self._file, header) if len(repr(self.shape)) > 60000 else \
            np.lib.format.write_array_header_1_0(self._file, header)

    def write(self, chunk: np.ndarray) -> None:
        chunk = np.ascontiguousarray(chunk, dtype=self.dtype)
        if chunk.shape[1:] != self.shape[1:]:
            raise ValueError(f"{self.path}: chunk rows of shape {chunk.shape[1:]}, file rows {self.shape[1:]}")
        if chunk.size:  # memoryview cannot cast a (0, k) view
            self._file.write(memoryview(chunk).cast("B"))
        self.rows += len(chunk)

    def close(self) -> None:
        self._file.close()
        if self.rows != self.shape[0]:
            raise ValueError(f"{self.path}: {self.rows} rows written, {self.shape[0]} declared")

    def __enter__(self) -> "NpyWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._file.close()


def _mapped_file(array: np.ndarray) -> tuple[str, int] | None:
    """(file, byte offset) of a whole memory-mapped C-contiguous array (np.load(mmap_mode='r')), else None."""
    if isinstance(array, np.memmap) and isinstance(array.base, mmap.mmap) and array.filename \
            and array.flags.c_contiguous:
        return array.filename, int(array.offset)
    return None


def read_rows(array: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Rows [lo, hi) of `array` as an in-memory array; file reads for a memory-mapped one (see module doc)."""
    where = _mapped_file(array)
    if where is None:
        return np.asarray(array[lo:hi])
    row_items = int(np.prod(array.shape[1:], dtype=np.int64))
    with open(where[0], "rb") as f:
        f.seek(where[1] + lo * row_items * array.dtype.itemsize)
        out = np.fromfile(f, dtype=array.dtype, count=(hi - lo) * row_items)
    return out.reshape((hi - lo, *array.shape[1:]))


def iter_chunks(array: np.ndarray, chunk_rows: int = 0) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, rows) over `array` in order, `chunk_rows` at a time (default: about CHUNK_BYTES)."""
    if not chunk_rows:
        chunk_rows = rows_per_chunk(int(np.prod(array.shape[1:], dtype=np.int64)) * array.dtype.itemsize)
    for lo in range(0, len(array), chunk_rows):
        yield lo, read_rows(array, lo, min(len(array), lo + chunk_rows))


def release_pages(array: np.ndarray) -> None:
    """Drop the pages a pass through a memory-mapped array left resident (the page cache keeps them)."""
    if _mapped_file(array) is not None and hasattr(mmap, "MADV_DONTNEED"):
        array.base.madvise(mmap.MADV_DONTNEED)


def refuse_beyond_memory(path: str, nbytes: int, problem: str, hint: str) -> None:
    """Refuse a declared size beyond this host's memory before anything is allocated (no guard where not POSIX);
    `problem` may name `{need}` and `{memory}` (GiB)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if nbytes > memory:
        problem = problem.format(need=f"{nbytes / 2**30:.1f}", memory=f"{memory / 2**30:.1f}")
        raise DatasetError(f"{path}: {problem}. HINT: {hint}")
