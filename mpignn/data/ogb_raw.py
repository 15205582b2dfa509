"""OGB node property graphs read straight from ogb's raw files (csv.gz, or npz for the binary releases).

Not ogb's `NodePropPredDataset`: it `torch.load`s a pickle torch >= 2.6 refuses and prompts on stdin, which
ranks lack. numpy and pandas (an ogb dependency) only; ogb is imported only to download.
"""
from __future__ import annotations

import csv
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from mpignn.data.graph import GraphData, csr_from_edges
from mpignn.data.hetero import build_hetero
from mpignn.data.npz_checks import check_splits
from mpignn.data.raw_public import fetch_staged, npz_arrays
from mpignn.errors import DatasetError

__all__ = ["OGB", "OgbInfo", "ogb_info", "ogb_files", "load_ogb"]

OGB = ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "ogbn-mag")


@dataclass(frozen=True)
class OgbInfo:
    """What ogb's `nodeproppred/master.csv` says about one dataset."""

    name: str
    folder: str
    """Folder under ROOT: the name with '-' as '_', as ogb names it."""
    url: str
    download_name: str
    """Top folder inside the downloaded zip (renamed to `folder`)."""
    split: str
    """Folder under `split/` holding train/valid/test.csv.gz."""
    binary: bool
    """True: raw/data.npz + raw/node-label.npz; False: raw/*.csv.gz."""
    num_classes: int
    hetero: bool = False
    """True: ogb's heterogeneous layout (num-node-dict, triplet-type-list, relations/, per-type folders)."""


def ogb_info(name: str) -> OgbInfo:
    """The master.csv entry of `name` (one of OGB)."""
    # find_spec does not import ogb: ogb.nodeproppred's __init__ imports torch and torch-geometric.
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError("the OGB datasets need the ogb package (for its dataset table and download helpers); "
                           "it is not installed. HINT: pip install ogb")
    with open(os.path.join(list(spec.submodule_search_locations)[0], "nodeproppred", "master.csv"), newline="") as f:
        rows = list(csv.reader(f))
    column = rows[0].index(name)
    field = {row[0]: row[column] for row in rows[1:]}
    return OgbInfo(name=name, folder=name.replace("-", "_"), url=field["url"], download_name=field["download_name"],
                   split=field["split"], binary=field["binary"] == "True", num_classes=int(field["num classes"]),
                   hetero=field.get("is hetero") == "True")


def ogb_files(info: OgbInfo) -> list[str]:
    """The files mpignn reads, relative to ROOT/<folder>; of a heterogeneous graph only the index files."""
    if info.hetero:
        return [f"raw/{f}.csv.gz" for f in ("num-node-dict", "triplet-type-list", "nodetype-has-label")] + [
            f"split/{info.split}/nodetype-has-split.csv.gz"]
    raw = ["raw/data.npz", "raw/node-label.npz"] if info.binary else [
        f"raw/{f}.csv.gz" for f in ("edge", "num-node-list", "num-edge-list", "node-feat", "node-label")]
    return raw + [f"split/{info.split}/{s}.csv.gz" for s in ("train", "valid", "test")]


def _download(info: OgbInfo, tmp: str) -> None:
    from ogb.utils.url import download_url, extract_zip

    extract_zip(download_url(info.url, tmp), tmp)


def _read_hetero(folder: str, info: OgbInfo) -> GraphData:
    """ogbn-mag's layout. Every relation also gets its reverse (`rev_<relation>`), as PyG's `ToUndirected`
    does for OGB_MAG, so messages reach the labelled type from every type."""
    raw = os.path.join(folder, "raw")
    counts = {t: int(v[0])
              for t, v in sorted(_read_csv(os.path.join(raw, "num-node-dict.csv.gz")).to_dict("list").items())}
    triplets = sorted(tuple(str(v) for v in row) for row in _csv(os.path.join(raw, "triplet-type-list.csv.gz"), str))
    labelled = [t for t, v in _read_csv(os.path.join(raw, "nodetype-has-label.csv.gz")).to_dict("list").items() if v[0]]
    if len(labelled) != 1 or labelled[0] not in counts:
        raise _corrupt(folder, f"expected one labelled node type; nodetype-has-label names {labelled}")
    target = labelled[0]
    edges: dict[tuple[str, str, str], np.ndarray] = {}
    for h, r, t in triplets:
        if h not in counts or t not in counts:
            raise _corrupt(folder, f"relation {h}___{r}___{t} names a node type num-node-dict lacks")
        ei = _csv(_need(folder, info, f"raw/relations/{h}___{r}___{t}/edge.csv.gz"), np.int64).T
        if h == t:
            edges[(h, r, t)] = np.concatenate([ei, ei[::-1]], axis=1)
        else:
            edges[(h, r, t)], edges[(t, f"rev_{r}", h)] = ei, ei[::-1]
    x = {t: _csv(p, np.float32) for t in counts
         if os.path.isfile(p := os.path.join(raw, "node-feat", t, "node-feat.csv.gz"))}
    y = _csv(_need(folder, info, f"raw/node-label/{target}/node-label.csv.gz"), np.int64).reshape(-1)
    split = _read_splits(folder, info, counts[target], target)
    if len(y) != counts[target] or (y.size and (y.min() < 0 or y.max() >= info.num_classes)):
        raise _corrupt(folder, f"expected {counts[target]} {target} labels in [0, {info.num_classes})")
    try:
        return build_hetero(info.name, counts, edges, x, target, y, split, info.num_classes)
    except DatasetError as exc:
        raise _corrupt(folder, str(exc).split(". HINT")[0]) from None


def _need(folder: str, info: OgbInfo, *files: str) -> str:
    """The path of `files[0]`, once every one of `files` (relative to `folder`) is there."""
    missing = [f for f in files if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise DatasetError(f"{folder} is incomplete: {', '.join(missing)} missing (mpignn reads raw/ and split/, "
                           "never processed/). HINT: copy the missing files from ogb's release zip "
                           f"({info.url}), or remove the folder so it is downloaded again")
    return os.path.join(folder, files[0])


def _read_splits(folder: str, info: OgbInfo, n: int, *target: str) -> dict[str, np.ndarray]:
    """train/val/test ids from split/<split>/[<target type>/], refused when out of range, repeated or shared."""
    where = os.path.join("split", info.split, *target)
    split = {key: _csv(_need(folder, info, f"{where}/{part}.csv.gz"), np.int64).reshape(-1)
             for key, part in (("train_idx", "train"), ("val_idx", "valid"), ("test_idx", "test"))}
    check_splits(lambda what, hint="": _corrupt(folder, f"{where}: {what}"), split, n)
    return split


def _csv(path: str, dtype: type | None) -> np.ndarray:
    return _read_csv(path, header=None, dtype=dtype).to_numpy()


def _read_csv(path: str, **options: Any) -> Any:
    """A gzipped csv as a pandas frame; a file that is not one (truncated, not gzip, empty, text where numbers
    belong) is a DatasetError naming it."""
    try:
        import pandas as pd
    except ImportError:
        raise DatasetError("reading OGB's csv.gz files needs pandas; it is not installed. HINT: pip install ogb "
                           "(it brings pandas)") from None
    try:
        return pd.read_csv(path, compression="gzip", **options)
    except (OSError, EOFError, ValueError) as exc:  # gzip's, zlib's, and pandas' parse errors (ValueErrors)
        raise _corrupt(os.path.dirname(path), f"{os.path.basename(path)} is not a readable csv.gz "
                                              f"({type(exc).__name__}: {' '.join(str(exc)[:120].split())})") from None


_CORRUPT = "the raw files are incomplete or corrupt; remove the folder to download it again, or copy the release " \
           "files in unchanged"


def _corrupt(folder: str, problem: str) -> DatasetError:
    return DatasetError(f"{folder}: {problem}. HINT: {_CORRUPT}")


def load_ogb(name: str, root: str) -> GraphData:
    """An ogbn graph from ROOT/<ogbn_name>/{raw,split} (downloaded if absent); unlabelled nodes get label -1."""
    info = ogb_info(name)
    folder = os.path.join(root, info.folder)
    files = ogb_files(info)
    if not os.path.isdir(folder):
        fetch_staged(name, folder, files, lambda tmp: _download(info, tmp), {info.download_name: folder}, info.url,
                     "ogb's release folder (raw/ and split/)")
    _need(folder, info, *files)
    if info.hetero:
        return _read_hetero(folder, info)
    raw = os.path.join(folder, "raw")
    if info.binary:  # npz_arrays: a truncated or pickled file is one line, not a zipfile traceback
        f = npz_arrays(os.path.join(raw, "data.npz"), ("num_nodes_list", "num_edges_list", "edge_index", "node_feat"))
        n, num_edges = int(f["num_nodes_list"][0]), int(f["num_edges_list"][0])
        edge_index, x = f["edge_index"][:, :num_edges], f["node_feat"][:n]
        labels = npz_arrays(os.path.join(raw, "node-label.npz"), ("node_label",))["node_label"].reshape(-1)
    else:
        n = int(_csv(os.path.join(raw, "num-node-list.csv.gz"), np.int64)[0, 0])
        num_edges = int(_csv(os.path.join(raw, "num-edge-list.csv.gz"), np.int64)[0, 0])
        edge_index = _csv(os.path.join(raw, "edge.csv.gz"), np.int64)[:num_edges].T
        x = _csv(os.path.join(raw, "node-feat.csv.gz"), np.float32)
        labels = _csv(os.path.join(raw, "node-label.csv.gz"), None).reshape(-1)
    if edge_index.shape[0] != 2:  # ids outside [0, n) are refused by csr_from_edges, as for every reader
        raise _corrupt(folder, f"edges must be [2, E] node ids; got shape {edge_index.shape}")
    if x.shape[0] != n or labels.shape[0] != n:
        raise _corrupt(folder, f"expected {n} rows of features and labels; got {x.shape[0]} and {labels.shape[0]}")
    if np.issubdtype(labels.dtype, np.floating):
        labels = np.where(np.isnan(labels), -1, labels)
    y = labels.astype(np.int64)
    if y.max() >= info.num_classes or y.min() < -1:
        raise _corrupt(folder, f"labels must lie in [0, {info.num_classes}); got [{y.min()}, {y.max()}]")
    split = _read_splits(folder, info, n)
    # OGB's citation graphs are directed; message passing wants both directions (as PyG's examples do).
    rowptr, col = csr_from_edges(*edge_index, n, drop_self_loops=True, symmetric=True, where=folder, hint=_CORRUPT)
    return GraphData(name=name, rowptr=rowptr, col=col, x=np.ascontiguousarray(x, dtype=np.float32), y=y,
                     num_classes=info.num_classes, **split)
