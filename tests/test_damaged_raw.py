"""Damaged raw files of public datasets (../shared/datasets, copied and altered) are refused in one line naming
the file and the fix, before any compiled kernel sees them: a Tolokers label array shorter than its features
crashed the process (the CSR kernel wrote past its counts), others loaded wrong graphs or hit numpy tracebacks."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from _mpirun import SHARED
from mpignn.data import load_dataset
from mpignn.data.graph import csr_from_edges
from mpignn.errors import DatasetError

DATASETS = SHARED / "datasets"
pytestmark = pytest.mark.skipif(not (DATASETS / "tolokers").is_dir(), reason="../shared/datasets is absent")


def _damaged(root: Path, folder: str, name: str, change) -> None:
    """Copy ../shared/datasets/FOLDER under `root` and rewrite its raw npz NAME with `change(arrays)`."""
    shutil.copytree(DATASETS / folder, root / folder)
    path = root / folder / "raw" / name
    with np.load(path) as f:
        arrays = dict(f)
    change(arrays)
    np.savez(path, **arrays)


def _shorter_labels(z):
    z["node_labels"] = z["node_labels"][:5000]
    for k in ("train_masks", "val_masks", "test_masks"):
        z[k] = z[k][:, :5000]


TOLOKERS = {  # damage -> what the refusal names
    "labels shorter than features": (_shorter_labels, r"x \[N, F\] and y \[N\] of one node count"),
    "negative labels": (lambda z: z.update(node_labels=z["node_labels"] - 3),
                        r"num_classes must be between 2 .*; got -1 from y\.max\(\) \+ 1"),
    "1-d features": (lambda z: z.update(node_features=z["node_features"][:, 0]), "of one node count"),
    "fractional labels": (lambda z: z.update(node_labels=z["node_labels"] + 0.5), "whole numbers"),
    "NaN features": (lambda z: z["node_features"].__setitem__((3, 1), np.nan),
                     r"x has NaN or infinite values \(as float32\), e\.g\. in row 3\."),
    "unlabelled train node": (lambda z: z["node_labels"].__setitem__(np.flatnonzero(z["train_masks"][0])[0], -1),
                              r"train_idx has 1 unlabelled node\(s\) \(y = -1\)"),
    "edge outside the graph": (lambda z: z["edges"].__setitem__((0, 1), len(z["node_labels"]) + 2),
                               r"tolokers\.npz: expected edges between nodes .*HINT: replace the raw files"),
    "train overlaps test": (lambda z: z.update(train_masks=z["train_masks"] | z["test_masks"]),
                            "train_idx and test_idx share"),
}


@pytest.mark.parametrize("damage", TOLOKERS)
def test_damaged_tolokers_is_refused_in_one_line(tmp_path, damage):
    change, needle = TOLOKERS[damage]
    _damaged(tmp_path, "tolokers", "tolokers.npz", change)
    with pytest.raises(DatasetError, match=needle) as caught:
        load_dataset("Tolokers", str(tmp_path))
    assert "tolokers.npz" in str(caught.value) and "HINT" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("damage,needle", [
    ("labels", r"labels\.npy: expected 4278 int labels .*, got int\d+ labels of shape \(4278, 1\)"),
    ("float labels", r"labels\.npy: expected 4278 int labels .*, got float64 labels of shape \(4278,\)"),
    ("labels in an npz", r"labels\.npy: expected a plain int npy array, got an npz archive"),
    ("negative", r"num_classes must be between 2 .*; got -2 from y\.max\(\) \+ 1"),
    ("unlabelled", r"train_idx has 1 unlabelled node\(s\) \(y = -1\)"),
    ("overlap", "train_idx and test_idx share"),
])
def test_damaged_imdb_is_refused_in_one_line(tmp_path, damage, needle):
    """A 2-D label array was a numpy broadcast traceback; negative labels and a test movie in training loaded."""
    if damage == "overlap":
        _damaged(tmp_path, "IMDB", "train_val_test_idx.npz",
                 lambda z: z.update(train_idx=np.concatenate([z["train_idx"], z["test_idx"][:3]])))
    else:
        shutil.copytree(DATASETS / "IMDB", tmp_path / "IMDB")
        labels = tmp_path / "IMDB" / "raw" / "labels.npy"
        y = np.load(labels)
        if damage == "unlabelled":
            with np.load(tmp_path / "IMDB" / "raw" / "train_val_test_idx.npz") as split:
                y[split["train_idx"].min()] = -1
        if damage == "labels in an npz":
            with open(labels, "wb") as f:  # a path would gain ".npz"
                np.savez(f, labels=y)
        else:
            np.save(labels, {"labels": y.reshape(-1, 1), "float labels": y.astype(np.float64),
                             "negative": y - 5}.get(damage, y))
    with pytest.raises(DatasetError, match=needle) as caught:
        load_dataset("IMDB", str(tmp_path))
    assert "HINT" in str(caught.value) and "\n" not in str(caught.value)


def test_a_feature_shape_beyond_memory_is_refused_before_allocating(tmp_path):
    _damaged(tmp_path, "Photo", "amazon_electronics_photo.npz",
             lambda z: z.update(attr_shape=np.array([z["attr_shape"][0], 10**10])))
    with pytest.raises(DatasetError, match=r"amazon_electronics_photo\.npz: expected a feature matrix that fits "
                                           r"in memory, got shape \(7650, 10000000000\).*HINT"):
        load_dataset("Amazon-Photo", str(tmp_path))


def test_a_citeseer_test_id_far_past_the_graph_is_refused(tmp_path):
    shutil.copytree(DATASETS / "CiteSeer", tmp_path / "CiteSeer")
    index = tmp_path / "CiteSeer" / "raw" / "ind.citeseer.test.index"
    lines = index.read_text().splitlines()
    index.write_text("\n".join(["900000000", *lines[1:]]) + "\n")
    with pytest.raises(DatasetError, match=r"ind\.citeseer\.test\.index: .*test ids 2312\.\.900000000 for 1000 test "
                                           r"rows.*HINT"):
        load_dataset("CiteSeer", str(tmp_path))


def test_a_planetoid_edge_outside_the_graph_names_the_graph_file(tmp_path):
    """The CSR refuses it, naming ind.cora.graph and the replacement, not the user's own node numbering."""
    import pickle

    from mpignn.data.raw_public import _unpickle

    shutil.copytree(DATASETS / "Cora", tmp_path / "Cora")
    path = tmp_path / "Cora" / "raw" / "ind.cora.graph"
    adjacency = dict(_unpickle(str(path)))
    adjacency[0] = [*adjacency[0], 2708 + 5]
    path.write_bytes(pickle.dumps(adjacency, protocol=2))
    with pytest.raises(DatasetError, match=r"ind\.cora\.graph: expected edges between nodes 0\.\.2707, got 1 edge "
                                           r"end\(s\) outside .*HINT: replace the raw files") as caught:
        load_dataset("Cora", str(tmp_path))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("bad", [5, -1])
def test_the_csr_kernels_never_see_an_edge_outside_the_graph(bad, symmetric):
    src, dst = np.array([0, 1, bad]), np.array([1, 2, 0])
    for s, d in ((src, dst), (dst, src)):
        with pytest.raises(DatasetError, match=r"expected edges between nodes 0\.\.4, got 1 edge end\(s\) outside"):
            csr_from_edges(s, d, 5, symmetric=symmetric)
    rowptr, col = csr_from_edges(np.array([0, 1, 4]), np.array([1, 2, 0]), 5, symmetric=symmetric)
    assert rowptr[-1] == len(col) == (6 if symmetric else 3)
