"""Held-out link prediction edges stored beside a partition, and each rank's share of them. numpy only.

    OUT/links/   val_pos.npy test_pos.npy val_neg.npy test_neg.npy   int64 [2, k], partition ids
                 val_neg_tails.npy test_neg_tails.npy                int64 [k, K]
                 SPLIT.json                                          shares, seed, K (written last)

A held-out pair belongs to the rank that owns its first node, as training pairs do (`data.links.undirected_pairs`).
"""
from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

import numpy as np

from mpignn.data.links import LinkSplit
from mpignn.errors import PartitionFormatError
from mpignn.fileio import atomic_dir, load_npy, read_json, save_npy, write_json
from mpignn.partition.validate import check_link_arrays

__all__ = ["save_link_split", "has_link_split", "load_link_split", "in_partition_ids", "link_share"]


def save_link_split(folder: str | os.PathLike, split: LinkSplit, params: dict) -> None:
    """Write `split` (original ids) into `folder/links/` in the partition's ids, atomically."""
    node_map = load_npy(Path(folder) / "node_map.npy")
    with atomic_dir(Path(folder) / "links") as tmp:
        for name, array in in_partition_ids(split, node_map).items():
            save_npy(tmp / f"{name}.npy", array)
        write_json(tmp / "SPLIT.json", params)


def in_partition_ids(split: LinkSplit, node_map: np.ndarray) -> dict[str, np.ndarray]:
    """{name: array} of `split` (original ids) in the partition's ids (`node_map`: new id of each old one)."""
    return {name: node_map[array] for name, array in vars(split).items()}


def has_link_split(folder: str | os.PathLike, params: dict) -> bool:
    """Whether `folder/links` holds the held-out edges of `params`; an unreadable SPLIT.json is refused (a damaged
    folder, not one of other edges)."""
    path = Path(folder) / "links" / "SPLIT.json"
    if not path.is_file():
        return False
    try:
        return read_json(path) == params
    except (OSError, ValueError) as exc:
        raise PartitionFormatError(f"{path} is corrupt ({type(exc).__name__}: {exc}). HINT: delete {path.parent} "
                                   "and partition again for --task link") from None


def load_link_split(folder: str | os.PathLike, part_offsets: np.ndarray, part_id: int) -> dict[str, np.ndarray]:
    """This part's held-out pairs ({name: array}): the rows whose first node it owns."""
    links = Path(folder) / "links"
    if not (links / "SPLIT.json").is_file():
        raise PartitionFormatError(f"expected held-out edges in {links}; found none. HINT: let mpignn make the "
                                   "partition for --task link (drop --partitions), or delete the folder to redo it")
    arrays = {}
    for name in (f.name for f in fields(LinkSplit)):  # the files save_link_split writes
        try:
            arrays[name] = load_npy(links / f"{name}.npy")
        except (ValueError, OSError, EOFError) as exc:
            raise PartitionFormatError(f"{links / name}.npy cannot be read ({exc}). HINT: delete {links} and "
                                       "partition again for --task link") from None
    check_link_arrays(arrays, links, int(part_offsets[-1]), folder)  # ids reach the sampler as seeds
    return link_share(arrays, part_offsets, part_id)


def link_share(arrays: dict[str, np.ndarray], part_offsets: np.ndarray, part_id: int) -> dict[str, np.ndarray]:
    """The held-out pairs of part `part_id` among all `arrays`: the rows whose first node it owns."""
    lo, hi = int(part_offsets[part_id]), int(part_offsets[part_id + 1])
    out = {}
    for split in ("val", "test"):
        pos = arrays[f"{split}_pos"]
        mine = (pos[0] >= lo) & (pos[0] < hi)
        out[f"{split}_pos"] = pos[:, mine]
        out[f"{split}_neg"] = arrays[f"{split}_neg"][:, mine]
        out[f"{split}_neg_tails"] = arrays[f"{split}_neg_tails"][mine]
    return out
