"""`--splits FILE`: fixed train/val/test node ids for any dataset, from an npz of int arrays `train`, `valid`
and `test` (the classic-GNN baselines' layout), and the tag that keys prepared data to the file's content.
numpy only.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from mpignn.data.cache import fingerprint
from mpignn.data.graph import GraphData
from mpignn.data.npz_checks import SPLIT_KEYS, Fail, check_labelled, check_splits, expect_array, failing, read_npz

__all__ = ["SPLIT_FILE_KEYS", "SPLITS_TAG", "apply_splits", "splits_tag", "split_source", "check_readable"]

SPLIT_FILE_KEYS = ("train", "valid", "test")
SPLITS_TAG = "|splits="
"""What a source (`data.dataset_source`) made with `--splits` ends with, before the file's fingerprint."""
_SAVE = "np.savez(FILE, train=ids, valid=ids, test=ids) with int node ids"


def _fail(path: str) -> Fail:
    return failing(f"--splits {path}", _SAVE)


def check_readable(path: str) -> None:
    """Raise the one-line DatasetError `apply_splits` would for a file that is absent or unreadable."""
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        why = "no such file" if not os.path.exists(path) else "not a readable file"
        raise _fail(path)(f"expected an npz of node ids ({', '.join(SPLIT_FILE_KEYS)}); got {why}",
                          f"pass the path of an existing split file, or save one: {_SAVE}")


def apply_splits(graph: GraphData, path: str) -> GraphData:
    """`graph` with the file's splits in place of its own (on a heterogeneous graph, ids local to the labelled
    type); raises DatasetError on one line naming the file, the problem and the fix."""
    schema = graph.schema
    if schema is None:
        n, lo = graph.num_nodes, 0
    else:
        k = schema.type_index(schema.target)
        n, lo = int(schema.node_counts[k]), int(schema.offsets[k])
    check_readable(path)
    fail = _fail(path)
    arrays = read_npz(path, SPLIT_FILE_KEYS, fail, f"{_SAVE} (rename train_idx/val_idx/test_idx or masks' "
                      "np.flatnonzero accordingly)", f"write it again: {_SAVE}")
    for key, ids in arrays.items():
        expect_array(fail, key, ids.shape, ids.dtype, "int", "1-D")
    ids = {key: arrays[key].astype(np.int64) for key in SPLIT_FILE_KEYS}
    check_splits(fail, ids, n)
    check_labelled(fail, np.asarray(graph.y)[lo:lo + n], ids, graph.num_classes)
    return dataclasses.replace(graph, **{name: ids[key] + lo for name, key in zip(SPLIT_KEYS, SPLIT_FILE_KEYS)})


def splits_tag(path: str) -> str:
    """What a source gains with `--splits path` (the file's content fingerprint, not its path); "" without one.
    Never raises: an unreadable file gets a fingerprint of its own, and loading it names it."""
    return f"{SPLITS_TAG}{fingerprint(path)}" if path else ""


def split_source(source: str) -> tuple[str, str]:
    """(the dataset's part of a source, its split file's fingerprint or "" where none was given)."""
    base, sep, tag = source.rpartition(SPLITS_TAG)
    return (base, tag) if sep else (source, "")
