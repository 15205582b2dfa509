"""Tier 1: OGB graphs from ogb's raw layouts (csv.gz and the binary npz release) in folders the test makes.

ogb's own loader torch.loads processed/ (refused by torch >= 2.6) and prompts on stdin without a RELEASE file;
mpignn must do neither, and download only folders that are absent.
"""
import builtins
import gzip
import io
import os
import pickle
import shutil
import urllib.error
import urllib.request
import zipfile

import numpy as np
import pytest

from mpignn.data import load_dataset
from mpignn.data.cache import cache_dir
from mpignn.errors import DatasetError

N = 30


def _graph(seed=0):
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, N, size=(2, 80))
    edges[:, :3] = [[4, 4, 7], [4, 9, 9]]  # a self loop and a repeated edge (7, 9) twice in one direction
    edges[:, 3] = [9, 7]  # ... and once the other way
    return {"edges": edges, "x": rng.normal(size=(N, 5)).astype(np.float32), "y": rng.integers(0, 40, N),
            "train": np.arange(0, 15), "valid": np.arange(15, 22), "test": np.arange(22, N - 2)}  # 28, 29: none


def _csv_gz(path, array, fmt="%d"):
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    np.savetxt(buf, np.asarray(array), fmt=fmt, delimiter=",")
    with gzip.open(path, "wt") as f:
        f.write(buf.getvalue())


def _junk_processed(folder, split):
    """What an ogb run leaves behind: pickles that must never be read (this one cannot even be unpickled)."""
    (folder / "processed").mkdir(parents=True)
    (folder / "processed" / "data_processed").write_bytes(pickle.dumps({"graph": 1})[:-3] + b"junk")
    (folder / "split" / split / "split_dict.pt").write_bytes(b"\x80\x04junk")


def make_arxiv(root, g, *, processed=False, release=True):
    """ogbn-arxiv's csv.gz layout (ogb/io/read_graph_raw.py read_csv_graph_raw, split 'time')."""
    folder = root / "ogbn_arxiv"
    _csv_gz(folder / "raw" / "edge.csv.gz", g["edges"].T)
    _csv_gz(folder / "raw" / "num-node-list.csv.gz", [N])
    _csv_gz(folder / "raw" / "num-edge-list.csv.gz", [g["edges"].shape[1]])
    _csv_gz(folder / "raw" / "node-feat.csv.gz", g["x"], fmt="%.8e")
    _csv_gz(folder / "raw" / "node-label.csv.gz", g["y"][:, None])
    _csv_gz(folder / "raw" / "node_year.csv.gz", np.full((N, 1), 2020))
    for part in ("train", "valid", "test"):
        _csv_gz(folder / "split" / "time" / f"{part}.csv.gz", g[part])
    if release:
        (folder / "RELEASE_v1.txt").write_text("ogbn-arxiv v1\n")
    if processed:
        _junk_processed(folder, "time")
    return folder


def make_papers(root, g, *, processed=False, release=True):
    """ogbn-papers100M's binary layout (read_binary_graph_raw): raw/data.npz + raw/node-label.npz, float labels
    with NaN for unlabelled papers."""
    folder = root / "ogbn_papers100M"
    (folder / "raw").mkdir(parents=True)
    np.savez_compressed(folder / "raw" / "data.npz", edge_index=g["edges"], num_nodes_list=np.array([N]),
                        num_edges_list=np.array([g["edges"].shape[1]]), node_feat=g["x"],
                        node_year=np.full((N, 1), 2020))
    labels = g["y"].astype(np.float32)[:, None]
    labels[[28, 29]] = np.nan  # unlabelled papers, outside every split
    np.savez_compressed(folder / "raw" / "node-label.npz", node_label=labels)
    for part in ("train", "valid", "test"):
        _csv_gz(folder / "split" / "time" / f"{part}.csv.gz", g[part])
    if release:
        (folder / "RELEASE_v1.txt").write_text("ogbn-papers100M v1\n")
    if processed:
        _junk_processed(folder, "time")
    return folder


@pytest.fixture(autouse=True)
def no_prompt_no_network(monkeypatch):
    """A prompt or a network access fails the test at once instead of blocking or going out."""
    def prompt(*args):
        raise AssertionError(f"prompted on stdin: {args}")

    def network(*args, **kwargs):
        raise AssertionError("tried the network")

    monkeypatch.setattr(builtins, "input", prompt)
    monkeypatch.setattr(urllib.request, "urlopen", network)


def _check(graph, g, name, num_classes):
    pairs = {(int(s), int(d)) for s, d in g["edges"].T if s != d}
    pairs |= {(d, s) for s, d in pairs}  # symmetrised, self loops dropped, repeats merged
    assert graph.name == name and graph.num_nodes == N and graph.num_edges == len(pairs)
    for v in range(N):
        assert set(graph.col[graph.rowptr[v]:graph.rowptr[v + 1]].tolist()) == {s for s, d in pairs if d == v}
    assert graph.x.dtype == np.float32 and np.allclose(graph.x, g["x"])
    assert graph.num_classes == num_classes
    for key, part in (("train_idx", "train"), ("val_idx", "valid"), ("test_idx", "test")):
        assert np.array_equal(getattr(graph, key), g[part])


@pytest.mark.parametrize("processed", [False, True], ids=["raw only", "with ogb's processed pickles"])
@pytest.mark.parametrize("release", [True, False], ids=["RELEASE file", "no RELEASE file"])
def test_arxiv_csv_layout(tmp_path, processed, release):
    g = _graph()
    make_arxiv(tmp_path, g, processed=processed, release=release)
    graph = load_dataset("ogbn-arxiv", str(tmp_path))
    _check(graph, g, "ogbn-arxiv", 40)
    assert np.array_equal(graph.y, g["y"])
    assert (cache_dir(str(tmp_path), "ogbn-arxiv") / "meta.json").is_file()


@pytest.mark.parametrize("processed", [False, True], ids=["raw only", "with ogb's processed pickles"])
@pytest.mark.parametrize("release", [True, False], ids=["RELEASE file", "no RELEASE file"])
def test_papers100m_binary_layout(tmp_path, processed, release):
    g = _graph(1)
    make_papers(tmp_path, g, processed=processed, release=release)
    graph = load_dataset("ogbn-papers100M", str(tmp_path))
    _check(graph, g, "ogbn-papers100M", 172)
    expected = g["y"].copy()
    expected[[28, 29]] = -1
    assert np.array_equal(graph.y, expected)


def test_cache_gone_then_processed_folder_read_again(tmp_path):
    """The issue's sequence: a first run, mpignn's cache removed, ogb's processed/ present: still loads."""
    g = _graph()
    make_arxiv(tmp_path, g, processed=True)
    first = load_dataset("ogbn-arxiv", str(tmp_path))
    shutil.rmtree(cache_dir(str(tmp_path), "ogbn-arxiv"))
    again = load_dataset("ogbn-arxiv", str(tmp_path))
    assert np.array_equal(first.col, again.col) and np.array_equal(first.y, again.y)


def test_absent_offline_names_the_folder_and_url(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DatasetError, match=r"ogbn-arxiv is not under .*ogbn_arxiv \(raw/edge.csv.gz, .* missing\) "
                                           r"and downloading it from http://snap.stanford.edu/ogb/data/nodeproppred/"
                                           r"arxiv.zip failed \(URLError: .*name resolution.*HINT"):
        load_dataset("ogbn-arxiv", str(tmp_path))
    assert os.listdir(tmp_path) == []  # no half-downloaded folder left behind


def test_absent_folder_is_downloaded_with_ogbs_helpers(tmp_path, monkeypatch):
    """ogb's download_url + extract_zip on the release zip (served locally); its top folder `arxiv/` is renamed."""
    g = _graph()
    make_arxiv(tmp_path / "release", g)
    payload = io.BytesIO()
    with zipfile.ZipFile(payload, "w") as zf:
        for path in (tmp_path / "release" / "ogbn_arxiv").rglob("*"):
            zf.write(path, "arxiv/" + str(path.relative_to(tmp_path / "release" / "ogbn_arxiv")))
    data = payload.getvalue()
    asked = []

    class Response(io.BytesIO):
        def info(self):
            return {"Content-Length": str(len(data))}

    def serve(url, *args, **kwargs):
        asked.append(url)
        return Response(data)

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    root = tmp_path / "root"
    graph = load_dataset("ogbn-arxiv", str(root))
    assert asked == ["http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip"]
    _check(graph, g, "ogbn-arxiv", 40)
    assert sorted(os.listdir(root)) == ["mpignn-cache", "ogbn_arxiv"]


def test_incomplete_folder_is_named_not_downloaded_or_deleted(tmp_path):
    g = _graph()
    folder = make_arxiv(tmp_path, g, processed=True)
    (folder / "raw" / "edge.csv.gz").unlink()
    (folder / "split" / "time" / "valid.csv.gz").unlink()
    with pytest.raises(DatasetError, match=r"ogbn_arxiv is incomplete: raw/edge.csv.gz, split/time/valid.csv.gz "
                                           r"missing .*never processed/.*HINT"):
        load_dataset("ogbn-arxiv", str(tmp_path))
    assert (folder / "processed" / "data_processed").is_file()


def test_corrupt_raw_files_are_named(tmp_path):
    g = _graph()
    g["edges"][1, 5] = N + 3
    make_arxiv(tmp_path, g)
    with pytest.raises(DatasetError, match=r"ogbn_arxiv: expected edges between nodes 0\.\.29, got 1 edge end\(s\) "
                       r"outside \[0, 30\).*HINT: the raw files are incomplete or corrupt; remove the folder"):
        load_dataset("ogbn-arxiv", str(tmp_path))


@pytest.mark.parametrize("damage,needle", [
    (lambda raw: (raw / "edge.csv.gz").write_bytes(b"not gzip"), r"edge\.csv\.gz is not a readable csv\.gz"),
    (lambda raw: (raw / "node-feat.csv.gz").write_bytes(gzip.compress(b"")), r"node-feat\.csv\.gz is not a readable"),
    (lambda raw: (raw / "num-node-list.csv.gz").write_bytes(gzip.compress(b"abc\n")), r"num-node-list\.csv\.gz is "
                                                                                        "not a readable"),
    (lambda raw: (raw / "edge.csv.gz").write_bytes((raw / "edge.csv.gz").read_bytes()[:100]), r"edge\.csv\.gz is not a "
                                                                                        "readable"),
    (lambda raw: _csv_gz(raw.parent / "split" / "time" / "test.csv.gz", [1, 2]), r"split/time: train_idx and "
                                                                                   r"test_idx share"),
])
def test_damaged_csv_files_are_one_line_naming_the_file(tmp_path, damage, needle):
    """Not gzip, empty, text where numbers belong, truncated, a test id in train: before, gzip's, zlib's or
    pandas' traceback, or a test split sharing nodes with training."""
    folder = make_arxiv(tmp_path, _graph())
    damage(folder / "raw")
    with pytest.raises(DatasetError, match=needle) as exc:
        load_dataset("ogbn-arxiv", str(tmp_path))
    assert "HINT" in str(exc.value) and "\n" not in str(exc.value)


def test_truncated_binary_release_is_one_line_naming_the_file(tmp_path):
    folder = make_papers(tmp_path, _graph(1))
    data = folder / "raw" / "data.npz"
    data.write_bytes(data.read_bytes()[:200])
    with pytest.raises(DatasetError, match=r"raw/data.npz: expected an npz of plain arrays .*HINT") as exc:
        load_dataset("ogbn-papers100M", str(tmp_path))
    assert "\n" not in str(exc.value)


def _text_gz(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(text)


def make_mag(root, seed=0):
    """ogbn-mag's heterogeneous csv.gz layout (ogb/io/read_graph_raw.py read_csv_heterograph_raw,
    read_node_label_hetero, read_nodesplitidx_split_hetero), small: types and relations as in the release."""
    rng = np.random.default_rng(seed)
    counts = {"author": 30, "field_of_study": 10, "institution": 5, "paper": 40}
    rels = {("author", "affiliated_with", "institution"): 20, ("author", "writes", "paper"): 60,
            ("paper", "cites", "paper"): 50, ("paper", "has_topic", "field_of_study"): 45}
    folder, raw = root / "ogbn_mag", root / "ogbn_mag" / "raw"
    _text_gz(raw / "num-node-dict.csv.gz", ",".join(counts) + "\n" + ",".join(map(str, counts.values())) + "\n")
    _text_gz(raw / "triplet-type-list.csv.gz", "".join(",".join(t) + "\n" for t in rels))
    _text_gz(raw / "nodetype-has-label.csv.gz", ",".join(counts) + "\nFalse,False,False,True\n")
    edges = {}
    for (h, r, t), e in rels.items():
        edges[(h, r, t)] = np.stack([rng.integers(0, counts[h], e), rng.integers(0, counts[t], e)])
        _csv_gz(raw / "relations" / f"{h}___{r}___{t}" / "edge.csv.gz", edges[(h, r, t)].T)
        _csv_gz(raw / "relations" / f"{h}___{r}___{t}" / "num-edge-list.csv.gz", [[e]])
    x = rng.normal(size=(40, 6)).astype(np.float32)
    y = rng.integers(0, 349, 40)
    _csv_gz(raw / "node-feat" / "paper" / "node-feat.csv.gz", x, fmt="%.8f")
    _csv_gz(raw / "node-label" / "paper" / "node-label.csv.gz", y.reshape(-1, 1))
    split = folder / "split" / "time"
    _text_gz(split / "nodetype-has-split.csv.gz", ",".join(counts) + "\nFalse,False,False,True\n")
    for part, idx in (("train", np.arange(20)), ("valid", np.arange(20, 30)), ("test", np.arange(30, 40))):
        _csv_gz(split / "paper" / f"{part}.csv.gz", idx.reshape(-1, 1))
    return counts, edges, x, y


def test_mag_heterogeneous_layout(tmp_path):
    counts, edges, x, y = make_mag(tmp_path)
    graph = load_dataset("ogbn-mag", str(tmp_path))
    schema = graph.schema
    assert schema.node_types == tuple(sorted(counts)) and schema.target == "paper"
    assert schema.feature_dims == (0, 0, 0, 6) and graph.num_classes == 349
    names = {"__".join(e) for e in schema.edge_types}
    assert {"author__writes__paper", "paper__rev_writes__author", "paper__cites__paper",
            "field_of_study__rev_has_topic__paper"} <= names and len(names) == 7
    lo = schema.offsets[schema.type_index("paper")]
    assert np.allclose(graph.x[lo:lo + 40, :6], x) and np.array_equal(graph.y[lo:], y)
    assert np.array_equal(graph.train_idx, np.arange(20) + lo)
    # every author -> paper "writes" edge arrives at its paper, typed as writes
    writes = schema.edge_types.index(("author", "writes", "paper"))
    a0 = schema.offsets[schema.type_index("author")]
    for s, d in edges[("author", "writes", "paper")].T:
        row = slice(graph.rowptr[lo + d], graph.rowptr[lo + d + 1])
        assert (a0 + s) in graph.col[row][graph.edge_type[row] == writes]
    (tmp_path / "ogbn_mag" / "raw" / "node-label" / "paper" / "node-label.csv.gz").unlink()
    shutil.rmtree(cache_dir(str(tmp_path), "ogbn-mag"))
    with pytest.raises(DatasetError, match="node-label.csv.gz missing"):
        load_dataset("ogbn-mag", str(tmp_path))


@pytest.mark.parametrize("part,ids,needle", [
    ("test", np.arange(15, 20), r"split/time/paper: train_idx and test_idx share 5 node\(s\)"),
    ("valid", np.array([20, 21, 21]), r"split/time/paper: val_idx must list each node once"),
    ("train", np.array([0, 40]), r"split/time/paper: train_idx has node ids outside \[0, 40\)"),
])
def test_mag_splits_are_checked_like_the_homogeneous_ones(tmp_path, part, ids, needle):
    """A paper in two splits, or twice in one, was loaded as given (only the range was checked)."""
    make_mag(tmp_path)
    _csv_gz(tmp_path / "ogbn_mag" / "split" / "time" / "paper" / f"{part}.csv.gz", ids.reshape(-1, 1))
    with pytest.raises(DatasetError, match=needle) as exc:
        load_dataset("ogbn-mag", str(tmp_path))
    assert "HINT" in str(exc.value) and "\n" not in str(exc.value)
