"""Nothing mpignn reads can run code (issue #25, item 1): public datasets are parsed from their raw files by
mpignn itself, PyG's processed/ files are ignored, and a crafted Planetoid pickle is refused by name."""
from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from _mpirun import SHARED
from mpignn.data import load_dataset
from mpignn.errors import DatasetError

DATASETS = SHARED / "datasets"
pytestmark = pytest.mark.skipif(not (DATASETS / "Cora").is_dir(), reason="../shared/datasets is absent")
FOLDER = {"Cora": "Cora", "CiteSeer": "CiteSeer", "Tolokers": "tolokers", "IMDB": "IMDB"}


def _copy(name: str, root: Path) -> Path:
    dst = root / FOLDER[name]
    shutil.copytree(DATASETS / FOLDER[name], dst)
    for f in dst.rglob("*"):
        f.chmod(0o644 if f.is_file() else 0o755)
    return dst


class _Payload:
    """Unpickling this creates `marker` (what a malicious file would do with a shell command instead)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (self.marker, "w"))


class _SystemPayload(_Payload):
    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def _pyg(name: str, root: Path) -> object:
    """What torch-geometric builds from the same trusted raw files (its own copy, so its processed/ is its own)."""
    from torch_geometric.datasets import IMDB, HeterophilousGraphDataset, Planetoid

    _copy(name, root)
    if name == "Tolokers":
        return HeterophilousGraphDataset(str(root), name)[0]
    if name == "IMDB":
        return IMDB(str(root / "IMDB"))[0]
    return Planetoid(str(root), name)[0]


def _edges(graph) -> np.ndarray:
    """(source, target) pairs of a GraphData, sorted."""
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.rowptr))
    pairs = np.stack([graph.col, dst], axis=1)
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


def _pyg_edges(edge_index: torch.Tensor, shift_src: int = 0, shift_dst: int = 0) -> np.ndarray:
    pairs = edge_index.numpy().T.astype(np.int64) + np.array([shift_src, shift_dst])
    return pairs


def _sorted(pairs: np.ndarray) -> np.ndarray:
    return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


@pytest.mark.parametrize("name", ["Cora", "CiteSeer", "Tolokers"])
def test_parsed_homogeneous_equals_pyg(tmp_path, name):
    ours = load_dataset(name, str(_copy(name, tmp_path / "ours").parent))
    assert not (tmp_path / "ours" / FOLDER[name] / "processed").exists()  # nothing PyG-processed written
    data = _pyg(name, tmp_path / "pyg")
    split = (lambda m: m[:, 0]) if name == "Tolokers" else (lambda m: m)
    np.testing.assert_array_equal(ours.x, data.x.numpy())
    np.testing.assert_array_equal(ours.y, data.y.numpy())
    np.testing.assert_array_equal(_edges(ours), _sorted(_pyg_edges(data.edge_index)))
    for part in ("train", "val", "test"):
        mask = split(getattr(data, f"{part}_mask")).numpy()
        np.testing.assert_array_equal(getattr(ours, f"{part}_idx"), np.flatnonzero(mask))
    assert ours.num_classes == int(data.y.max()) + 1 and ours.num_nodes == data.num_nodes


def test_tolokers_other_split_equals_pyg(tmp_path):
    ours = load_dataset("Tolokers:split=7", str(_copy("Tolokers", tmp_path / "ours").parent))
    data = _pyg("Tolokers", tmp_path / "pyg")
    for part in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(ours, f"{part}_idx"),
                                      np.flatnonzero(getattr(data, f"{part}_mask")[:, 7].numpy()))


@pytest.mark.skipif(not (DATASETS / "IMDB").is_dir(), reason="needs ../shared/datasets/IMDB")
def test_parsed_imdb_equals_pyg(tmp_path):
    from mpignn.data.hetero import build_hetero
    from mpignn.data.raw_public import read_imdb

    raw = read_imdb(str(_copy("IMDB", tmp_path / "ours") / "raw"))
    data = _pyg("IMDB", tmp_path / "pyg")
    assert list(raw["counts"].items()) == [(t, data[t].num_nodes) for t in data.node_types]
    assert list(raw["edges"]) == list(data.edge_types)
    for et, ei in raw["edges"].items():  # exactly, order included
        np.testing.assert_array_equal(ei, data[et].edge_index.numpy())
    for t in data.node_types:
        np.testing.assert_array_equal(raw["x"][t], data[t].x.numpy())
    movie = data["movie"]
    np.testing.assert_array_equal(raw["y"], movie.y.numpy())
    for part in ("train", "val", "test"):
        np.testing.assert_array_equal(raw[f"{part}_idx"], np.flatnonzero(movie[f"{part}_mask"].numpy()))
    # and the GraphData load_dataset returns is the one the PyG-built parts give
    ours = load_dataset("IMDB", str(tmp_path / "ours"))
    theirs = build_hetero("IMDB", {t: data[t].num_nodes for t in data.node_types},
                          {et: data[et].edge_index.numpy() for et in data.edge_types},
                          {t: data[t].x.numpy() for t in data.node_types}, "movie", movie.y.numpy(),
                          {f"{p}_idx": np.flatnonzero(movie[f"{p}_mask"].numpy()) for p in ("train", "val", "test")})
    for f in dataclasses.fields(ours):
        a, b = getattr(ours, f.name), getattr(theirs, f.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=f.name)
        else:
            assert a == b, f.name


@pytest.mark.parametrize("name", ["Cora", "Tolokers", "IMDB"])
def test_crafted_processed_files_are_never_read(tmp_path, name):
    if not (DATASETS / FOLDER[name]).is_dir():
        pytest.skip(f"needs ../shared/datasets/{FOLDER[name]}")
    marker = tmp_path / "pwned"
    processed = _copy(name, tmp_path / "root") / "processed"
    processed.mkdir()
    for f in ("pre_transform.pt", "pre_filter.pt"):  # what PyG torch.loads with weights_only=False first
        torch.save(_Payload(str(marker)), processed / f)
    torch.save({"data": _Payload(str(marker))}, processed / "data.pt")
    try:
        graph = load_dataset(name, str(tmp_path / "root"))
    finally:
        assert not marker.exists(), "a processed/*.pt payload ran"
    assert graph.num_nodes > 0 and len(graph.train_idx) > 0


@pytest.mark.parametrize("payload", [_Payload, _SystemPayload])
@pytest.mark.parametrize("part", ["x", "graph", "ally"])
def test_crafted_planetoid_pickle_is_refused(tmp_path, payload, part):
    marker = tmp_path / "pwned"
    raw = _copy("Cora", tmp_path / "root") / "raw"
    (raw / f"ind.cora.{part}").write_bytes(pickle.dumps(payload(str(marker)), protocol=2))
    try:
        with pytest.raises(DatasetError) as err:
            load_dataset("Cora", str(tmp_path / "root"))
    finally:
        assert not marker.exists(), "the ind.cora pickle payload ran"
    msg = str(err.value)
    assert "\n" not in msg and str(raw / f"ind.cora.{part}") in msg and "HINT:" in msg, msg
    assert "is not an array, csr matrix or adjacency list" in msg, msg


def test_allowed_globals_cannot_be_turned_into_code(tmp_path):
    """A pickle that uses only allow-listed names, but wires them to build an object array or a defaultdict
    whose factory is something else, is refused too."""
    from mpignn.data.raw_public import read_planetoid

    raw = _copy("Cora", tmp_path / "root") / "raw"
    # numpy dtype('O8') through the allowed numpy.dtype global: object arrays could hold anything
    (raw / "ind.cora.y").write_bytes(pickle.dumps(np.array([1, 2], dtype=object), protocol=2))
    with pytest.raises(DatasetError, match=r"ind\.cora\.y.*dtype 'O8'"):
        read_planetoid(str(raw), "Cora")
    (raw / "ind.cora.y").write_bytes((DATASETS / "Cora" / "raw" / "ind.cora.y").read_bytes())
    # defaultdict(dict) through the allowed collections.defaultdict global
    (raw / "ind.cora.graph").write_bytes(pickle.dumps(__import__("collections").defaultdict(dict), protocol=2))
    with pytest.raises(DatasetError, match=r"ind\.cora\.graph"):
        read_planetoid(str(raw), "Cora")


def test_download_fetches_raw_files_only(tmp_path, monkeypatch):
    """With the raw files missing, mpignn downloads exactly them with PyG's URL and `download_url`, never
    running `process()`, and parses them itself."""
    import torch_geometric.data
    from torch_geometric.datasets import Planetoid

    urls = []

    def fake_download(url: str, folder: str, log: bool = True, filename: str | None = None) -> str:
        urls.append(url)
        name = url.rpartition("/")[2]
        shutil.copy(DATASETS / "Cora" / "raw" / name, os.path.join(folder, name))
        return os.path.join(folder, name)

    def no_process(self) -> None:
        raise AssertionError("Planetoid.process() ran")

    monkeypatch.setattr(torch_geometric.data, "download_url", fake_download)
    monkeypatch.setattr(Planetoid, "process", no_process)
    graph = load_dataset("Cora", str(tmp_path))
    assert sorted(urls) == sorted(f"{Planetoid.url}/{p.name}" for p in (DATASETS / "Cora" / "raw").iterdir())
    assert sorted(os.listdir(tmp_path / "Cora" / "raw")) == sorted(os.listdir(DATASETS / "Cora" / "raw"))
    assert graph.num_nodes == 2708 and not (tmp_path / "Cora" / "processed").exists()
