"""Real datasets by name from their published raw files, read without pickle, and `--splits FILE` (issue 38, item 6).

Tier 1: tiny files in each raw format (Amazon/Coauthor npz, WikiCS data.json, Flickr's four files, Reddit's two
npz) load as PyG's own `process()` builds them (compared with PyG on the same files); a split file's every bad
input, and a dataset folder with a missing or truncated raw file, is one line with a HINT. Tier 2: the shipped
Photo and CS load by name with their README's counts and their shipped split files; another split file gets
another automatic partition, and a `--partitions` folder made with other splits is refused.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from _graphs import small_graph
from _mpirun import ROOT, SHARED, run_cli_here
from mpignn.data import KNOWN, check_known, dataset_key, dataset_source, load_dataset, public_folder, save_npz
from mpignn.data.public import class_split
from mpignn.errors import ConfigError, DatasetError, PartitionFormatError

DATASETS = SHARED / "datasets"
needs_shipped = pytest.mark.skipif(not (DATASETS / "Photo").is_dir() or not (DATASETS / "CS").is_dir(),
                                   reason="../shared/datasets (the shipped Photo and CS) is absent")

# a tiny graph: 12 nodes, 3 classes; one-way edges, a repeated edge and a self loop, as raw files hold them
N = 12
Y = np.array([0, 1, 2] * 4, dtype=np.int64)
ROWS = np.array([0, 0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9, 10, 11, 11, 2])
COLS = np.array([1, 1, 2, 3, 4, 3, 5, 6, 7, 8, 9, 10, 11, 0, 5, 2])
X = np.random.default_rng(0).integers(0, 3, size=(N, 5)).astype(np.float32)


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "HINT:" in text, text
    return text


def _csr(rows, cols, n):
    order = np.lexsort((cols, rows))
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.add.at(indptr, np.asarray(rows) + 1, 1)
    return np.cumsum(indptr).astype(np.int32), np.asarray(cols, dtype=np.int32)[order]


def _edge_set(edge_index) -> set:
    return set(map(tuple, np.asarray(edge_index).T.tolist()))


def _write_gnn_benchmark(path: Path) -> None:
    """shchur's npz layout: csr parts adj_* and attr_*, labels, and a pickled class_names never to be read."""
    adj_indptr, adj_indices = _csr(ROWS, COLS, N)
    attr_r, attr_c = np.nonzero(X)
    attr_indptr, attr_indices = _csr(attr_r, attr_c, N)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, adj_data=np.ones(len(ROWS), np.float32), adj_indices=adj_indices, adj_indptr=adj_indptr,
             adj_shape=np.array([N, N]), attr_data=X[attr_r, attr_c][np.lexsort((attr_c, attr_r))],
             attr_indices=attr_indices, attr_indptr=attr_indptr, attr_shape=np.array([N, 5]), labels=Y,
             class_names=np.array(["a", None, 3], dtype=object))


BENCHMARK_FILES = {"Amazon-Computers": "Computers/raw/amazon_electronics_computers.npz",
                   "Amazon-Photo": "Photo/raw/amazon_electronics_photo.npz",
                   "Coauthor-CS": "CS/raw/ms_academic_cs.npz", "Coauthor-Physics": "Physics/raw/ms_academic_phy.npz"}


def test_the_names_are_known_and_live_where_pyg_keeps_them():
    for name, file in BENCHMARK_FILES.items():
        assert name in KNOWN and dataset_key(name.upper()) == name
        assert public_folder(name, "R") == str(Path("R") / file.split("/")[0])  # PyG's Amazon/Coauthor folders
    for name in ("WikiCS[:split=K]", "Flickr", "Reddit", "ogbn-arxiv"):
        assert name in KNOWN
    check_known("ogbn-arxiv")  # read from ogb's raw files (tests/test_ogb.py)
    assert dataset_key("wikics:split=19") == "WikiCS:split=19" and dataset_key("WikiCS:split=0") == "WikiCS"
    with pytest.raises(DatasetError, match=r"split=K with K in 0\.\.19"):
        dataset_key("WikiCS:split=20")


@pytest.mark.parametrize("name", sorted(BENCHMARK_FILES))
def test_amazon_and_coauthor_npz_load_as_pyg_builds_them(tmp_path, name):
    from torch_geometric.io import read_npz

    path = tmp_path / BENCHMARK_FILES[name]
    _write_gnn_benchmark(path)
    g = load_dataset(name, str(tmp_path))
    ref = read_npz(str(path), to_undirected=True)  # PyG's own parser (it never reads class_names either)
    assert g.num_nodes == N and g.num_classes == 3 and g.name == name
    assert _edge_set(g.edge_index()) == _edge_set(ref.edge_index.numpy()) and g.num_edges == ref.num_edges
    assert not any(u == v for u, v in _edge_set(g.edge_index()))  # self loops removed, both directions kept
    assert np.array_equal(g.x, ref.x.numpy()) and set(np.unique(g.x)) <= {0.0, 1.0}
    assert np.array_equal(g.y, ref.y.numpy())
    # no published split: 60/20/20 of each class, seeded, the same on every load
    train, val, test = g.train_idx, g.val_idx, g.test_idx
    assert (len(train), len(val), len(test)) == (6, 3, 3)
    assert np.array_equal(np.sort(np.concatenate([train, val, test])), np.arange(N))
    assert all(np.array_equal(np.bincount(Y[s], minlength=3), np.full(3, len(s) // 3)) for s in (train, val, test))
    again = class_split(Y)
    assert all(np.array_equal(a, b) for a, b in zip(again, (train, val, test)))


def _wikics(num_splits: int = 20) -> dict:
    rng = np.random.default_rng(1)
    links = [[] for _ in range(N)]
    for u, v in zip(ROWS, COLS):
        links[int(u)].append(int(v))
    train = np.zeros((num_splits, N), dtype=bool)
    val = np.zeros((num_splits, N), dtype=bool)
    for k in range(num_splits):
        perm = rng.permutation(np.arange(8))
        train[k, perm[:5]], val[k, perm[5:]] = True, True
    test = np.zeros(N, dtype=bool)
    test[8:] = True
    return {"features": X.tolist(), "labels": Y.tolist(), "links": links, "train_masks": train.tolist(),
            "val_masks": val.tolist(), "stopping_masks": val.tolist(), "test_mask": test.tolist()}


def test_wikics_json_loads_as_pyg_builds_it_with_each_fixed_split(tmp_path):
    import torch_geometric.datasets as pyg

    data = _wikics()
    for top in (tmp_path / "WikiCS", tmp_path / "pyg"):
        (top / "raw").mkdir(parents=True)
        (top / "raw" / "data.json").write_text(json.dumps(data))
    ref = pyg.WikiCS(str(tmp_path / "pyg"), is_undirected=True)[0]
    for split in (0, 7):
        g = load_dataset(f"WikiCS:split={split}", str(tmp_path))
        assert _edge_set(g.edge_index()) == _edge_set(ref.edge_index.numpy()) and g.num_edges == ref.num_edges
        assert (2, 2) in _edge_set(g.edge_index())  # to_undirected keeps self loops
        assert np.array_equal(g.x, ref.x.numpy()) and np.array_equal(g.y, ref.y.numpy())
        assert np.array_equal(g.train_idx, np.flatnonzero(ref.train_mask[:, split].numpy()))
        assert np.array_equal(g.val_idx, np.flatnonzero(ref.val_mask[:, split].numpy()))
        assert np.array_equal(g.test_idx, np.flatnonzero(ref.test_mask.numpy()))


@pytest.mark.parametrize("bad,needle", [
    (2.5, r"data\.json: expected whole-number neighbour ids in links, got 1 fractional, e\.g\. 2\.5\. HINT"),
    (N + 4, rf"WikiCS/raw: expected edges between nodes 0\.\.{N - 1}, got 1 edge end\(s\) outside.*HINT"),
])
def test_wikics_neighbour_ids_that_are_fractional_or_outside_are_refused(tmp_path, bad, needle):
    """A fractional id was truncated to an int (a wrong edge, silently)."""
    data = _wikics()
    data["links"][0].append(bad)
    (tmp_path / "WikiCS" / "raw").mkdir(parents=True)
    (tmp_path / "WikiCS" / "raw" / "data.json").write_text(json.dumps(data))
    with pytest.raises(DatasetError, match=needle) as err:
        load_dataset("WikiCS", str(tmp_path))
    _one_line(err.value)


def _write_flickr(raw: Path) -> None:
    import scipy.sparse as sp

    raw.mkdir(parents=True)
    keep = ROWS != COLS
    sym = sp.csr_matrix((np.ones(2 * keep.sum()), (np.r_[ROWS[keep], COLS[keep]], np.r_[COLS[keep], ROWS[keep]])),
                        shape=(N, N))
    sym.data[:] = 1
    sp.save_npz(raw / "adj_full.npz", sym)
    np.save(raw / "feats.npy", X.astype(np.float64))
    (raw / "class_map.json").write_text(json.dumps({str(i): int(Y[i]) for i in range(N) if i != 11}))
    (raw / "role.json").write_text(json.dumps({"tr": [0, 1, 2, 3, 4, 5], "va": [6, 7, 8], "te": [10, 9]}))


def _write_reddit(raw: Path) -> None:
    import scipy.sparse as sp

    raw.mkdir(parents=True)
    kinds = np.array([1, 1, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3])
    np.savez(raw / "reddit_data.npz", feature=X, label=Y.astype(np.int32), node_types=kinds)
    sp.save_npz(raw / "reddit_graph.npz", sp.coo_matrix((np.ones(len(ROWS)), (ROWS, COLS)), shape=(N, N)))


@pytest.mark.parametrize("name", ["Flickr", "Reddit"])
def test_flickr_and_reddit_load_as_pyg_builds_them(tmp_path, name):
    import torch_geometric.datasets as pyg

    write = _write_flickr if name == "Flickr" else _write_reddit
    write(tmp_path / name / "raw")
    write(tmp_path / "pyg" / "raw")
    ref = getattr(pyg, name)(str(tmp_path / "pyg"))[0]
    g = load_dataset(name, str(tmp_path))
    assert _edge_set(g.edge_index()) == _edge_set(ref.edge_index.numpy()) and g.num_edges == ref.num_edges
    assert np.array_equal(g.x, ref.x.numpy()) and np.array_equal(g.y, ref.y.numpy())
    for ours, mask in ((g.train_idx, ref.train_mask), (g.val_idx, ref.val_mask), (g.test_idx, ref.test_mask)):
        assert np.array_equal(ours, np.flatnonzero(mask.numpy()))
    if name == "Flickr":
        assert g.y[11] == -1  # absent from class_map.json, and in no split
    else:
        assert (2, 2) in _edge_set(g.edge_index())  # Reddit's coalesce keeps self loops


# --- the shipped Photo and CS (../shared/datasets; README: counts as PyG builds them, 60/20/20 split files)

SHIPPED = {"Amazon-Photo": ("Photo", 7650, 238162, 745, 8, "amazon-photo_split.npz", (4590, 1530, 1530)),
           "Coauthor-CS": ("CS", 18333, 163788, 6805, 15, "coauthor-cs_split.npz", (10999, 3666, 3668))}


@pytest.fixture(scope="module")
def shipped_root(tmp_path_factory):
    """The shipped Photo and CS folders, copied (mpignn writes its cache under the root)."""
    root = tmp_path_factory.mktemp("shipped")
    for folder, *_ in SHIPPED.values():
        shutil.copytree(DATASETS / folder, root / folder)
    return root


@needs_shipped
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_shipped_photo_and_cs_load_by_name_with_their_split_files(shipped_root, name):
    folder, nodes, edges, features, classes, split_file, sizes = SHIPPED[name]
    g = load_dataset(name, str(shipped_root))
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (nodes, edges, features, classes)
    assert sum(map(len, (g.train_idx, g.val_idx, g.test_idx))) == nodes  # the default 60/20/20 covers all
    splits = str(DATASETS / folder / "splits" / split_file)
    fixed = load_dataset(name, str(shipped_root), splits=splits)
    assert tuple(map(len, (fixed.train_idx, fixed.val_idx, fixed.test_idx))) == sizes
    with np.load(splits) as z:
        assert np.array_equal(fixed.val_idx, z["valid"]) and np.array_equal(fixed.x, g.x)


# --- --splits: every bad input is one line naming the problem and the fix

def _npz_graph(tmp_path: Path) -> str:
    path = tmp_path / "graph.npz"
    save_npz(str(path), small_graph(50, 0))
    return f"npz:{path}"


GOOD = {"train": np.arange(0, 30), "valid": np.arange(30, 40), "test": np.arange(40, 50)}


def _bad_file(tmp_path: Path, case: str) -> Path:
    path = tmp_path / "splits.npz"
    arrays = dict(GOOD)
    if case == "truncated":
        np.savez(path, **arrays)
        path.write_bytes(path.read_bytes()[:-40])
        return path
    if case == "missing file":
        return tmp_path / "nowhere.npz"
    if case == "garbage":
        path.write_bytes(b"garbage, neither zip nor npy")
        return path
    if case == "npy, not npz":
        np.save(tmp_path / "splits.npy", GOOD["train"])
        return tmp_path / "splits.npy"
    edits = {"out of range": {"test": np.array([40, 50])}, "negative": {"valid": np.array([-1, 30])},
             "duplicate": {"train": np.array([0, 1, 1])}, "overlap": {"valid": np.array([29, 30])},
             "missing key": {"test": None}, "float": {"train": np.arange(30) * 1.0},
             "bool mask": {"train": np.arange(50) < 30}, "2-D": {"train": np.arange(30).reshape(2, 15)},
             "pickled": {"valid": np.array([30, None], dtype=object)}, "empty": {"test": np.array([], np.int64)}}
    for key, value in edits[case].items():
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("case, words", [
    ("out of range", r"test has node ids outside \[0, 50\).*HINT: node ids are row numbers"),
    ("negative", r"valid has node ids outside \[0, 50\): min -1"),
    ("duplicate", r"train must list each node once; got 1 repeated id\(s\), e.g. 1.*HINT: save np.unique\(train\)"),
    ("overlap", r"train and valid share 1 node\(s\), e.g. 29.*HINT: remove them from one split"),
    ("missing key", r"expected an npz of plain arrays train, valid, test; got no test \(keys: train, valid\)\. "
                    r"HINT: np\.savez\(FILE, .*\(rename train_idx/val_idx/test_idx"),
    ("float", r"train must be an int 1-D array; got float64.*HINT: save np.asarray\(train, dtype=np.int64\)"),
    ("bool mask", r"got bool with shape \(50,\).*HINT: train holds node ids, not a mask: save np.flatnonzero"),
    ("2-D", r"train must be an int 1-D array; got int64 with shape \(2, 15\)"),
    ("pickled", r"got valid: dtype object \(pickled Python objects, which mpignn never loads\)\. HINT: save "
                r"np\.asarray\(valid, dtype=np\.int64\)"),
    ("empty", r"test is empty \(nothing to report the accuracy on\)"),
    ("truncated", r"expected an npz of plain arrays train, valid, test; got BadZipFile.*HINT: write it again: "),
    ("garbage", r"expected an npz .*; got BadZipFile: not a valid npz file"),  # was numpy's "pickled"
    ("missing file", r"got no such file.*HINT: pass the path of an existing split file"),
    ("npy, not npz", r"got a single \.npy array"),
])
def test_each_bad_split_file_is_one_line(tmp_path, case, words):
    dataset = _npz_graph(tmp_path)
    path = _bad_file(tmp_path, case)
    with pytest.raises(DatasetError, match=words) as err:
        load_dataset(dataset, str(tmp_path), splits=str(path))
    assert _one_line(err.value).startswith(f"--splits {path}: ")


def test_a_split_node_without_a_label_is_refused(tmp_path):
    g = small_graph(50, 0)
    g.y[5] = -1
    g.train_idx = g.train_idx[g.train_idx != 5]
    save_npz(str(tmp_path / "g.npz"), g)
    np.savez(tmp_path / "s.npz", **GOOD)
    with pytest.raises(DatasetError, match=r"train has 1 unlabelled node\(s\) \(y = -1\), e.g. 5"
                       r".*HINT: drop them: np\.setdiff1d\(train, unlabelled ids\)"):
        load_dataset(f"npz:{tmp_path / 'g.npz'}", str(tmp_path), splits=str(tmp_path / "s.npz"))


def test_a_good_split_file_replaces_any_datasets_splits(tmp_path):
    dataset = _npz_graph(tmp_path)
    path = tmp_path / "s.npz"
    np.savez(path, train=np.arange(10, 40).astype(np.int32), valid=np.arange(0, 10), test=np.arange(40, 50))
    g = load_dataset(dataset, str(tmp_path), splits=str(path))
    assert np.array_equal(g.train_idx, np.arange(10, 40)) and g.train_idx.dtype == np.int64
    assert np.array_equal(g.val_idx, np.arange(10)) and np.array_equal(g.test_idx, np.arange(40, 50))


def test_the_flag_reaches_graph_options_and_link_prediction_refuses_it():
    from mpignn.config.graph_options import GraphOptions
    from _config import parse
    from mpignn.tasks import make_task

    cfg = parse(["--dataset", "Amazon-Photo", "--splits", "s.npz"])
    assert isinstance(cfg, GraphOptions) and cfg.splits == "s.npz"
    with pytest.raises(ConfigError, match=r"--splits sets which nodes.*--task link holds out edges.*HINT: drop "):
        parse(["--splits", "s.npz", "--task", "link"])


# --- a dataset folder with a missing or truncated raw file

@pytest.fixture
def offline(monkeypatch):
    import torch_geometric.data

    def fail(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(torch_geometric.data, "download_url", fail)
    monkeypatch.setattr(torch_geometric.data, "download_google_url", fail)


@pytest.mark.parametrize("name, missing", [("Amazon-Photo", "amazon_electronics_photo.npz"), ("WikiCS", "data.json"),
                                           ("Flickr", "role.json"), ("Reddit", "reddit_graph.npz")])
def test_a_missing_raw_file_is_named_with_its_folder(tmp_path, offline, name, missing):
    raw = tmp_path / {"Amazon-Photo": "Photo"}.get(name, name) / "raw"
    if name == "Flickr":
        _write_flickr(raw)
    elif name == "Reddit":
        _write_reddit(raw)
    else:
        raw.mkdir(parents=True)
    (raw / missing).unlink(missing_ok=True)
    with pytest.raises(DatasetError) as err:
        load_dataset(name, str(tmp_path))
    text = _one_line(err.value)
    assert f"{name} is not under {raw} ({missing} missing) and downloading it failed (OSError: network " in text
    assert f"HINT: copy the raw files into {raw}" in text
    assert not [p for p in raw.iterdir() if p.name.startswith(".download-")]  # nothing half-written left


@pytest.mark.parametrize("name, file, words", [
    ("Amazon-Photo", "Photo/raw/amazon_electronics_photo.npz", "expected an npz of plain arrays"),
    ("WikiCS", "WikiCS/raw/data.json", "expected a complete JSON file, got JSONDecodeError"),
    ("Flickr", "Flickr/raw/feats.npy", "expected a plain float npy array"),
    ("Flickr", "Flickr/raw/adj_full.npz", "expected an npz of plain arrays"),
    ("Reddit", "Reddit/raw/reddit_data.npz", "expected an npz of plain arrays"),
])
def test_a_truncated_raw_file_is_one_line_even_after_caching(tmp_path, name, file, words):
    path = tmp_path / file
    if name == "Amazon-Photo":
        _write_gnn_benchmark(path)
    elif name == "WikiCS":
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(_wikics()))
    else:
        (_write_flickr if name == "Flickr" else _write_reddit)(path.parent)
    load_dataset(name, str(tmp_path))  # complete: parsed and cached
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    with pytest.raises(DatasetError, match=words) as err:
        load_dataset(name, str(tmp_path))  # the cache is keyed by the raw files' content: read again, refused
    text = _one_line(err.value)
    assert str(path) in text and "HINT: replace it with the dataset's original file" in text


# --- the split file's content decides which prepared partition is used

def _load(rt, dataset, root, **options):
    from mpignn import runtime

    return runtime.load_local_graph(rt, dataset, str(root), fanout=[2], cache_size=0, **options)


def test_another_split_file_gets_another_automatic_partition(rt, tmp_path, caplog):
    dataset = _npz_graph(tmp_path)
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(a, **GOOD)
    np.savez(b, train=np.arange(20, 50), valid=np.arange(0, 10), test=np.arange(10, 20))
    sources = {dataset_source(dataset), dataset_source(dataset, splits=str(a)), dataset_source(dataset, splits=str(b))}
    assert len(sources) == 3
    folders = []
    for splits in (str(a), str(b), "", str(a)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="mpignn.partition.source"):
            graph = _load(rt, dataset, tmp_path, splits=splits)
        folders.append((graph.folder, "partitioned" in caplog.text))
        part = graph.part
        if splits:  # the file's nodes, by their original ids
            trained = np.sort(np.asarray(part.orig_id)[np.asarray(part.train_idx) - part.lo])
            assert np.array_equal(trained, GOOD["train"] if splits == str(a) else np.arange(20, 50))
    assert [made for _, made in folders] == [True, True, True, False]  # the same file again: reused
    assert len({folder for folder, _ in folders}) == 3 and folders[0][0] == folders[3][0]


def _partition(tmp_path, dataset, out, splits=""):
    from mpignn.partition.cli import main

    extra = ["--splits", splits] if splits else []
    assert main(["--dataset", dataset, "--root", str(tmp_path), "--num-parts", "1", "--method", "random", "--out",
                 str(out), *extra]) == 0


def test_a_partition_folder_made_with_other_splits_is_refused(rt, tmp_path):
    dataset = _npz_graph(tmp_path)
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(a, **GOOD)
    np.savez(b, train=np.arange(20, 50), valid=np.arange(0, 10), test=np.arange(10, 20))
    _partition(tmp_path, dataset, tmp_path / "pa", str(a))
    _partition(tmp_path, dataset, tmp_path / "p0")
    assert len(_load(rt, dataset, tmp_path, partitions=str(tmp_path / "pa"), splits=str(a)).part.train_idx) == 30
    shutil.copyfile(a, tmp_path / "a-copy.npz")  # the same content at another path: the same splits
    _load(rt, dataset, tmp_path, partitions=str(tmp_path / "pa"), splits=str(tmp_path / "a-copy.npz"))
    for folder, splits, words in ((tmp_path / "pa", str(b), "was made with a --splits file of content"),
                                  (tmp_path / "pa", "", "hold the dataset's own splits \\(no --splits\\)"),
                                  (tmp_path / "p0", str(a), "was made with the dataset's own splits")):
        with pytest.raises(PartitionFormatError, match=f"expected {folder}.*{words}") as err:
            _load(rt, dataset, tmp_path, partitions=str(folder), splits=splits)
        text = _one_line(err.value)
        assert "HINT: pass the split file it was made with, or partition again: python -m mpignn.partition" in text
    with pytest.raises(PartitionFormatError, match=r"--splits \S+nowhere.npz: expected an npz of node ids"):
        _load(rt, dataset, tmp_path, partitions=str(tmp_path / "pa"), splits=str(tmp_path / "nowhere.npz"))


def test_the_training_cli_fails_on_a_bad_split_file_in_one_line(tmp_path):
    """Tier 2: `python -m mpignn.train` as one process runs it (no mpirun): exit 1, one error line, no traceback."""
    dataset = _npz_graph(tmp_path)
    path = _bad_file(tmp_path, "overlap")
    code, out = run_cli_here("mpignn.train", ["--dataset", dataset, "--root", tmp_path, "--splits", path, "--epochs",
                                              "1", "--hidden", "8", "--fanout", "2"], cwd=ROOT)
    assert code == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    errors = [line for line in out.splitlines() if "error" in line and "--splits" in line]
    assert errors and "train and valid share 1 node(s), e.g. 29" in errors[0] and "HINT:" in errors[0], out[-3000:]
    assert not list(tmp_path.glob("mpignn-parts/*/META.json"))  # nothing half-written taken for a partition


def test_garbage_bytes_in_a_raw_npz_say_it_is_not_a_valid_npz(tmp_path):
    """numpy takes bytes that are neither zip nor npy for a pickle: its 'pickled data' text misled."""
    path = tmp_path / "Photo" / "raw" / "amazon_electronics_photo.npz"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage, neither zip nor npy")
    with pytest.raises(DatasetError, match=r"amazon_electronics_photo\.npz: expected an npz of plain arrays .*got "
                                           r"BadZipFile: not a valid npz file") as err:
        load_dataset("Amazon-Photo", str(tmp_path))
    text = _one_line(err.value)
    assert "pickle" not in text and "HINT: replace it with the dataset's original file" in text


def test_a_raw_npz_member_that_zipfile_cannot_open_is_one_line(tmp_path):
    """A corrupt member may raise what no reader lists (here RuntimeError: an encryption flag): still the file's."""
    path = tmp_path / "Photo" / "raw" / "amazon_electronics_photo.npz"
    _write_gnn_benchmark(path)
    blob = bytearray(path.read_bytes())
    central = blob.index(b"PK\x01\x02")  # the first member's central directory entry: set "encrypted"
    blob[central + 8] |= 1
    path.write_bytes(bytes(blob))
    with pytest.raises(DatasetError, match=r"amazon_electronics_photo\.npz: expected an npz of plain arrays .*got "
                                           r"\w+: RuntimeError: .*encrypted") as err:
        load_dataset("Amazon-Photo", str(tmp_path))
    assert "HINT: replace it with the dataset's original file, or delete it" in _one_line(err.value)
