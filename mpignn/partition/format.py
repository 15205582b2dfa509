"""The partition folder (layout: docs/partitions.md): META.json, and how a part is read back (`write.py` writes
it). numpy only, never pickle.

Part p owns the contiguous new ids [offsets[p], offsets[p+1]), so any id's owner is one binary search over
`part_offsets` (on any device); all ids inside the folder are these new ids. Loading trusts none of it on
checksums alone: `validate.py` checks the dtypes, shapes and the contents the kernels index with.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from mpignn.data.split_file import split_source
from mpignn.errors import PartitionFormatError
from mpignn.fileio import load_npy, read_json
from mpignn.partition.validate import check_meta, check_part, sha256_and_max

__all__ = ["FORMAT_VERSION", "PART_FILES", "HETERO_FILES", "PartitionMeta", "LocalPart", "read_meta",
           "meta_from_json", "load_partition", "part_dir", "check_matches", "check_source", "check_splits", "report",
           "owner_of", "group_by_owner", "balance"]

FORMAT_VERSION = 1
PART_FILES = ("rowptr", "col", "x", "y", "train_idx", "val_idx", "test_idx", "orig_id", "halo_gid", "halo_deg")
HETERO_FILES = ("type_rowptr",)  # heterogeneous graphs: [n_p * edge types + 1] runs of each row's edge types


@dataclass(frozen=True)
class PartitionMeta:
    """META.json, parsed."""

    dataset: str
    method: str
    seed: int
    num_parts: int
    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    part_offsets: tuple[int, ...]
    edge_cut: int
    parts: tuple[dict, ...] = field(repr=False)
    hetero: dict | None = None  # HeteroSchema.to_json() of a heterogeneous graph
    source: str | None = None  # data.dataset_source of the files it was made from (None: made before it was recorded)

    def type_blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """(first global id, node type) of each (part, type) block in id order, for `data.hetero.type_of`."""
        counts = np.array([p["type_counts"] for p in self.parts], dtype=np.int64)  # [parts, types]
        starts = np.asarray(self.part_offsets[:-1], dtype=np.int64)[:, None] + np.cumsum(counts, 1) - counts
        kinds = np.broadcast_to(np.arange(counts.shape[1]), counts.shape)
        return starts.reshape(-1), np.ascontiguousarray(kinds).reshape(-1)


def owner_of(gids: np.ndarray, part_offsets: np.ndarray) -> np.ndarray:
    """Owning part (rank) of each global id: parts own contiguous id ranges [offsets[p], offsets[p+1])."""
    return np.searchsorted(part_offsets, gids, side="right") - 1


def group_by_owner(gids: np.ndarray, part_offsets: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray,
                                                                                    np.ndarray]:
    """(owner of each id, a stable order grouping ids by owner, ids per owner): an all-to-all's send layout."""
    owner = owner_of(gids, part_offsets)
    return owner, np.argsort(owner, kind="stable"), np.bincount(owner, minlength=size).astype(np.int64)


@dataclass
class LocalPart:
    """One part in memory: the rank's own nodes, their in-edges, features, labels and splits."""

    meta: PartitionMeta
    part_id: int
    rowptr: np.ndarray
    col: np.ndarray
    x: np.ndarray
    y: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    orig_id: np.ndarray
    halo_gid: np.ndarray
    halo_deg: np.ndarray
    type_rowptr: np.ndarray | None = None  # heterogeneous graphs (HETERO_FILES)

    @property
    def lo(self) -> int:
        return self.meta.part_offsets[self.part_id]

    @property
    def training_bytes(self) -> int:
        """Bytes of the arrays training reads (mapped ones included: sampling touches all of them)."""
        arrays = [getattr(self, name) for name in TRAINING_FILES + HETERO_FILES]
        return sum(int(a.nbytes) for a in arrays if a is not None)

    @property
    def hi(self) -> int:
        return self.meta.part_offsets[self.part_id + 1]


def part_dir(folder: str | os.PathLike, part_id: int) -> Path:
    return Path(folder) / f"part-{part_id:03d}"


def balance(values: list[int]) -> float:
    """Largest over mean (1.0: even; also for all zeros), as META.json's reports give it."""
    mean = sum(values) / len(values)
    return max(values) / mean if mean else 1.0


def report(meta: dict, seconds: float) -> dict:
    parts = meta["parts"]
    return {
        "dataset": meta["dataset"], "method": meta["method"], "num_parts": meta["num_parts"],
        "edge_cut": meta["edge_cut"], "edge_cut_pct": 100.0 * meta["edge_cut"] / max(1, meta["num_edges"]),
        "node_balance": balance([p["nodes"] for p in parts]), "edge_balance": balance([p["edges"] for p in parts]),
        "train_balance": balance([p["train"] for p in parts]), "halo": [p["halo"] for p in parts],
        "nodes": [p["nodes"] for p in parts], "seconds": seconds,
        # heterogeneous graphs: nodes of each type per part (the printed report adds each type's balance)
        "type_nodes": ({t: [p["type_counts"][k] for p in parts] for k, t in enumerate(meta["hetero"]["node_types"])}
                       if meta.get("hetero") else None),
        "type_cut": ({"__".join(e): sum(p["cut_by_edge_type"][k] for p in parts)
                      for k, e in enumerate(meta["hetero"]["edge_types"])} if meta.get("hetero") else None),
    }


def meta_from_json(raw: dict) -> PartitionMeta:
    """META.json's content (for a folder or in memory) as a PartitionMeta; a malformed field raises KeyError,
    ValueError or TypeError, which `read_meta` turns into one naming the file."""
    counts = {f.name: int(raw[f.name]) for f in fields(PartitionMeta) if f.type == "int"}
    return PartitionMeta(**counts, dataset=raw["dataset"], method=raw["method"],
                         part_offsets=tuple(raw["part_offsets"]), parts=tuple(raw["parts"]), hetero=raw.get("hetero"),
                         source=None if raw.get("source") is None else str(raw["source"]))


def read_meta(folder: str | os.PathLike) -> PartitionMeta:
    """Parse META.json."""
    folder = Path(folder)
    path = folder / "META.json"
    hint = f"HINT: re-create it with python -m mpignn.partition --out {folder} --force"
    if not folder.is_dir():
        raise PartitionFormatError(f"partition folder {folder} does not exist. HINT: create it with "
                                   "python -m mpignn.partition, or leave out --partitions")
    if not path.is_file():
        raise PartitionFormatError(f"{folder} has no META.json, so it is not a (complete) partition. {hint}")
    try:
        raw = read_json(path)
        if raw.get("format") != FORMAT_VERSION:
            raise PartitionFormatError(f"{path} has format {raw.get('format')}, this mpignn reads "
                                       f"{FORMAT_VERSION}. {hint}")
        return meta_from_json(raw)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PartitionFormatError(f"{path} is corrupt ({type(exc).__name__}: {exc}). {hint}") from None


def check_matches(meta: PartitionMeta, folder: str | os.PathLike, *, num_parts: int | None = None,
                  dataset: str | None = None) -> None:
    """Raise PartitionFormatError when the folder was made for another world size or dataset."""
    if num_parts is not None and meta.num_parts != num_parts:
        raise PartitionFormatError(f"{folder} has {meta.num_parts} parts but the job has {num_parts} ranks. "
                                   f"HINT: run with mpirun -np {meta.num_parts}, or partition again with "
                                   f"--num-parts {num_parts}")
    if dataset is not None and meta.dataset != dataset:
        raise PartitionFormatError(f"{folder} was made for dataset '{meta.dataset}', not '{dataset}'. "
                                   "HINT: pass the matching --dataset, or partition this dataset")


def check_source(meta: PartitionMeta, folder: str | os.PathLike, source: str | None, dataset: str,
                 root: str) -> bool:
    """Whether the folder's recorded source names the content of `source`, that of `dataset`'s files now (None: not
    on this host); False with nothing to compare or another dataset. The same one with other content is refused."""
    # the split files' tags are compared by `check_splits`, before: here the dataset's files alone
    recorded, source = (split_source(s or "")[0] for s in (meta.source, source))
    if "|" not in recorded or "|" not in source:
        return False
    if recorded == source:
        return True
    if recorded.partition("|")[0] != source.partition("|")[0]:
        return False
    folder = Path(folder)
    links = " --task link (and your --link-* flags)" if (folder / "links").is_dir() else ""
    raise PartitionFormatError(
        f"expected {folder} to be partitioned from {dataset} as it is now (source {source}); found it records "
        f"{recorded}: made from an older or other version of those files, so it would train on that graph. "
        f"HINT: partition it again: python -m mpignn.partition --dataset {dataset} --root {root} --num-parts "
        f"{meta.num_parts} --method {meta.method} --seed {meta.seed}{links} --out {folder} --force (or a new --out)")


def check_splits(meta: PartitionMeta, folder: str | os.PathLike, tag: str, splits: str, dataset: str) -> None:
    """Refuse a partition folder made with other splits than this run's `tag` (`split_file.splits_tag`): it would
    train and score other nodes than asked."""
    recorded = split_source(meta.source or "")[1]
    wanted = split_source(tag)[1]
    if recorded == wanted:
        return
    made = f"with a --splits file of content {recorded}" if recorded else "with the dataset's own splits"
    asked = f"--splits {splits} (content {wanted})" if wanted else "the dataset's own splits (no --splits)"
    fix = f"--splits {splits} " if wanted else ""
    raise PartitionFormatError(
        f"expected {folder} to hold {asked}; found it was made {made}, so it would train and score other nodes. "
        f"HINT: pass the split file it was made with, or partition again: python -m mpignn.partition --dataset "
        f"{dataset} {fix}--num-parts {meta.num_parts} --method {meta.method} --seed {meta.seed} --out {folder} "
        "--force (or a new --out)")


# What training reads of a part; `load_partition(mmap=True)` maps the big ones (features, columns) and the
# ones training never reads (original ids, halo), so only what sampling touches becomes resident.
TRAINING_FILES = ("rowptr", "col", "x", "y", "train_idx", "val_idx", "test_idx")
MAPPED_FILES = ("x", "col", "orig_id", "halo_gid", "halo_deg")


def load_partition(folder: str | os.PathLike, part_id: int, *, verify: bool = True,
                   mmap: bool = False) -> LocalPart:
    """Read one part, checking sizes, with `verify` checksums, and always what the kernels index with.

    `mmap` maps MAPPED_FILES read-only, so their pages are the page cache's, not the process's.
    """
    folder = Path(folder)
    meta = read_meta(folder)
    if not 0 <= part_id < meta.num_parts:
        raise PartitionFormatError(f"{folder} has parts 0..{meta.num_parts - 1}; part {part_id} asked for. "
                                   f"HINT: run with mpirun -np {meta.num_parts}")
    check_meta(meta, folder)
    pdir = part_dir(folder, part_id)
    hint = f"HINT: re-create the folder with python -m mpignn.partition --out {folder} --force"
    expected = meta.parts[part_id]["files"]
    # scanned: each int64 array's max, read with its checksum: the id arrays' range checks (col above all, the
    # biggest array after x) then ride on that read, without a second pass or a page fault per mapped page
    arrays, scanned = {}, {}
    for name in PART_FILES + (HETERO_FILES if meta.hetero else ()):
        path = pdir / f"{name}.npy"
        if not path.is_file():
            raise PartitionFormatError(f"{path} is missing. {hint}")
        if name not in expected:
            raise PartitionFormatError(f"META.json lists no size or checksum for {path}. {hint}")
        size = path.stat().st_size
        if size != expected[name]["bytes"]:
            raise PartitionFormatError(f"{path} has {size} bytes, META.json says {expected[name]['bytes']} "
                                       f"(truncated or replaced). {hint}")
        if verify:
            digest, scanned[name] = sha256_and_max(path)
            if digest != expected[name]["sha256"]:
                raise PartitionFormatError(f"{path} fails its sha256 checksum (corrupt). {hint}")
        try:
            arrays[name] = load_npy(path, mmap=mmap and name in MAPPED_FILES)
        except (ValueError, OSError, EOFError) as exc:
            raise PartitionFormatError(f"{path} cannot be read ({exc}). {hint}") from None
    check_part(meta, part_id, arrays, pdir, folder, scanned)
    return LocalPart(meta=meta, part_id=part_id, **arrays)
