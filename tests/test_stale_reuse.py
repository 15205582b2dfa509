"""Tier 1/2: nothing stale is reused. Automatic partitions follow the dataset's files (their content, not their
path or the name as typed: tests/test_prepared_by_content.py has copies and moves), and a dataset cache whose
arrays do not match its meta.json is rebuilt, not used."""
import os
import shutil

import numpy as np

from _graphs import needs_cora, small_graph
from _mpirun import SHARED
from mpignn.data import dataset_source, load_dataset, save_npz
from mpignn.data.cache import cache_dir, load_cache, save_cache

def _load(rt, dataset, root):
    from mpignn import runtime

    return runtime.load_local_graph(rt, dataset, str(root), fanout=[2], cache_size=0)


def test_a_regenerated_npz_at_the_same_path_gets_a_new_partition(rt, tmp_path):
    npz = tmp_path / "graph.npz"
    save_npz(str(npz), small_graph(300, 0))
    first = _load(rt, f"npz:{npz}", tmp_path / "root")
    assert first.part.meta.num_nodes == 300
    again = _load(rt, f"npz:{npz}", tmp_path / "root")
    assert again.folder == first.folder, "an unchanged file re-partitioned"
    save_npz(str(npz), small_graph(400, 1))  # regenerated in place
    second = _load(rt, f"npz:{npz}", tmp_path / "root")
    assert second.folder != first.folder
    assert second.part.meta.num_nodes == 400
    assert np.array_equal(np.asarray(second.part.y), small_graph(400, 1).y)


def test_the_same_relative_path_from_two_working_directories(rt, tmp_path, monkeypatch):
    root = tmp_path / "root"  # one absolute --root shared by both runs (a cluster's scratch)
    for name, nodes in (("a", 300), ("b", 500)):
        (tmp_path / name).mkdir()
        save_npz(str(tmp_path / name / "graph.npz"), small_graph(nodes, nodes))
    monkeypatch.chdir(tmp_path / "a")
    in_a = _load(rt, "npz:graph.npz", root)
    monkeypatch.chdir(tmp_path / "b")
    in_b = _load(rt, "npz:graph.npz", root)
    assert (in_a.part.meta.num_nodes, in_b.part.meta.num_nodes) == (300, 500)
    assert in_a.folder != in_b.folder
    assert len(list((root / "mpignn-parts").iterdir())) == 2


def test_npy_folder_source_follows_its_files(tmp_path):
    from mpignn.data.npy import write_npy_folder

    folder = tmp_path / "g"
    g = small_graph(200, 0)
    folder.mkdir()
    write_npy_folder(folder, rowptr=g.rowptr, col=g.col, y=g.y, train_idx=g.train_idx, val_idx=g.val_idx,
                     test_idx=g.test_idx, num_classes=g.num_classes, name="g", x=g.x)
    before = dataset_source(f"npy:{folder}")
    assert dataset_source(f"npy:{folder}") == before
    x = np.load(folder / "x.npy")
    x[0, 0] += 1.0
    np.save(folder / "x.npy", x)
    assert dataset_source(f"npy:{folder}") != before
    assert dataset_source("synthetic:seed=0") == "synthetic"  # canonical parameters, no files


def _cached(tmp_path):
    graph = small_graph(300, 0)
    graph.name = "Cora"
    folder = save_cache(str(tmp_path), graph)
    assert load_cache(str(tmp_path), "Cora") is not None
    return graph, folder


def test_a_cache_array_of_another_size_is_not_used(tmp_path, caplog):
    graph, folder = _cached(tmp_path)
    data = (folder / "col.npy").read_bytes()
    (folder / "col.npy").write_bytes(data + data[-64:])  # longer than meta.json says (np.load would accept it)
    with caplog.at_level("WARNING", logger="mpignn.data.cache"):
        assert load_cache(str(tmp_path), "Cora") is None
    assert "col.npy has" in caplog.text and "rebuilding" in caplog.text


def test_a_cache_array_with_other_content_is_not_used(tmp_path):
    graph, folder = _cached(tmp_path)
    x = np.load(folder / "x.npy")
    x[5] = 7.0  # same size, other numbers
    np.save(folder / "x.npy", x)
    assert load_cache(str(tmp_path), "Cora") is None


@needs_cora
def test_an_altered_cora_cache_is_rebuilt_from_the_raw_files(tmp_path):
    shutil.copytree(SHARED / "datasets" / "Cora", tmp_path / "Cora")
    good = load_dataset("Cora", str(tmp_path))
    x_path = cache_dir(str(tmp_path), "Cora") / "x.npy"
    size = os.path.getsize(x_path)
    with open(x_path, "r+b") as f:
        f.truncate(size - 4 * 1433)  # one row short
    again = load_dataset("Cora", str(tmp_path))
    assert np.array_equal(np.asarray(again.x), np.asarray(good.x))
    assert os.path.getsize(x_path) == size, "the cache was not rewritten"


@needs_cora
def test_replaced_public_raw_files_are_read_again_not_a_stale_cache(tmp_path, caplog):
    shutil.copytree(SHARED / "datasets" / "Cora", tmp_path / "Cora")
    root = str(tmp_path)
    source = dataset_source("Cora", root)
    good = load_dataset("Cora", root)
    assert dataset_source("Cora", root) == source  # loading (and caching) changes no raw file
    index = tmp_path / "Cora" / "raw" / "ind.cora.test.index"
    ids = index.read_text().split()
    index.write_text("\n".join(ids[1:] + ids[:1]) + "\n")  # the same ids in another order: other test rows
    assert dataset_source("Cora", root) != source, "an automatic partition would reuse the old graph"
    with caplog.at_level("WARNING", logger="mpignn.data.cache"):
        again = load_dataset("Cora", root)
    assert "other files" in caplog.text
    assert not np.array_equal(np.asarray(again.x), np.asarray(good.x))  # read from the new files
