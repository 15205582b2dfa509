"""Datasets behind one registry (`KNOWN`), so `--dataset NAME` means the same in every command.

Layer 4 (data): imports the leaves, config and mpi; never partition, sampling or anything above, never torch or
torch-geometric at module level.
"""
from __future__ import annotations

import hashlib
import os

from mpignn.data.cache import fingerprint, load_cache, save_cache
from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.npy import load_npy_folder
from mpignn.data.npz import load_npz, save_npz
from mpignn.data.public import NUM_SPLITS, OGB, PUBLIC, load_public, split_key
from mpignn.data.split_file import apply_splits, splits_tag
from mpignn.data.synthetic import SyntheticSpec, make_synthetic, parse_synthetic
from mpignn.errors import DatasetError

__all__ = ["GraphData", "csr_from_edges", "load_dataset", "dataset_key", "dataset_source", "source_present",
           "make_synthetic", "SyntheticSpec", "save_npz", "KNOWN", "check_known"]

_NAMED = (*PUBLIC, *OGB)
KNOWN = ("synthetic", "npz:PATH", "npy:FOLDER", *(f"{n}[:split=K]" if n in NUM_SPLITS else n for n in _NAMED))


def _public_key(name: str) -> str | None:
    """The canonical key of a public name (any case), or None; DatasetError for options it does not take."""
    lowered = {n.lower(): n for n in _NAMED}
    base, sep, options = name.partition(":")
    known = lowered.get(base.lower())
    if known in NUM_SPLITS:
        return split_key(known, options)
    return None if known is None or sep else known


def dataset_key(name: str) -> str:
    """A stable, file-system safe id of the dataset (used to match partitions to datasets)."""
    if name.startswith("synthetic"):
        spec = parse_synthetic(name.partition(":")[2])
        defaults = SyntheticSpec()
        changed = [f"{k}={v}" for k, v in spec.__dict__.items() if getattr(defaults, k) != v]
        return "synthetic" + (":" + ",".join(changed) if changed else "")
    return _public_key(name) or name


def dataset_source(name: str, root: str = "data", splits: str = "") -> str:
    """What prepared data (automatic partitions, a folder's recorded source) is keyed by. Not collective.

    The dataset's content, never its path or mtime: a regenerated file is another source, a moved one the same."""
    key = dataset_key(name)
    if name.startswith(("npz:", "npy:")):
        source = f"{name[:3]}|{fingerprint(name[4:])}"
    elif _public_key(name) is not None and os.path.isdir(public_folder(key, root)):
        source = f"{key}|{raw_fingerprint(key, root)}"
    else:
        source = key
    return source + splits_tag(splits)


def source_present(name: str, root: str = "data") -> bool:
    """Whether this host holds the files `dataset_source` fingerprints (always, for a synthetic graph): training
    from `--partitions` needs none, so a folder's recorded source is checked only then."""
    if name.startswith(("npz:", "npy:")):
        return os.access(name[4:], os.R_OK)
    if _public_key(name) is not None:
        return os.path.isdir(public_folder(dataset_key(name), root))
    return True


def public_folder(key: str, root: str) -> str:
    """The folder a public dataset's files live in under `root` (its raw files, ogb's split/ too)."""
    base = key.partition(":")[0]
    return os.path.join(root, PUBLIC[base].folder if base in PUBLIC else base.replace("-", "_"))  # ogb's folder


def raw_fingerprint(key: str, root: str) -> str:
    """A fingerprint of a public dataset's files (relative paths and `cache.fingerprint`s; processed/ and hidden
    folders left out), so replaced raw files are read again while a copied or moved `--root` keeps it."""
    h = hashlib.sha256()
    top = public_folder(key, root)
    for folder, subfolders, files in os.walk(top):
        subfolders[:] = sorted(d for d in subfolders if d != "processed" and not d.startswith("."))
        for file in sorted(files):
            path = os.path.join(folder, file)
            h.update(f"{os.path.relpath(path, top)}|{fingerprint(path)}|".encode())
    return h.hexdigest()[:16]


def check_known(name: str) -> None:
    """Raise DatasetError (with the known names) unless `name` is a dataset mpignn can load."""
    if name == "synthetic" or name.startswith("synthetic:"):
        parse_synthetic(name.partition(":")[2])  # its options too: here, where every rank agrees on the error
        return
    if name.startswith(("npz:", "npy:")) or _public_key(name) is not None:
        return
    raise DatasetError(f"unknown dataset '{name}'; known: {', '.join(KNOWN)}. HINT: e.g. --dataset Cora, or "
                       "--dataset npz:/path/graph.npz for your own graph")


def load_dataset(name: str, root: str = "data", mmap: bool = False, splits: str = "") -> GraphData:
    """Load a dataset, preprocessing and caching it on first use. Not collective: under MPI call it inside
    `mpignn.mpi.root_first`. `splits`' ids replace the dataset's after the cache, which holds it as published."""
    check_known(name)
    if name.startswith("synthetic"):
        graph = make_synthetic(parse_synthetic(name.partition(":")[2]))
    elif name.startswith("npz:"):
        graph = load_npz(name[4:])
    elif name.startswith("npy:"):
        graph = load_npy_folder(name[4:])
    else:
        key = dataset_key(name)
        # Without its folder (raw files removed after caching) the cache is all there is: it is used as it is.
        present = os.path.isdir(public_folder(key, root))
        graph = load_cache(root, key, mmap=mmap, source=raw_fingerprint(key, root) if present else None)
        if graph is None:
            graph = load_public(key, root)
            save_cache(root, graph, source=raw_fingerprint(key, root))  # after a download: the files as they are now
    return apply_splits(graph, splits) if splits else graph
