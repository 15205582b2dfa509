"""Tier 1: the dataset registry: synthetic, npz validation, Planetoid and Tolokers from ../shared, cache, offline
errors (and one 1-rank training run on Tolokers)."""
import json
import os
import shutil

import numpy as np
import pytest

from _mpirun import SHARED, run_python
from mpignn.data import dataset_key, load_dataset, make_synthetic, save_npz
from mpignn.data.cache import cache_dir
from mpignn.data.synthetic import SyntheticSpec, parse_synthetic
from mpignn.errors import DatasetError

needs_shared = pytest.mark.skipif(not (SHARED / "datasets" / "Cora").is_dir(),
                                  reason="../shared/datasets (the shipped raw files) is absent")
needs_tolokers = pytest.mark.skipif(not (SHARED / "datasets" / "tolokers" / "raw" / "tolokers.npz").is_file(),
                                    reason="../shared/datasets/tolokers (the shipped Tolokers npz) is absent")


def test_synthetic_is_deterministic_and_sized():
    a = make_synthetic(SyntheticSpec(num_nodes=2000, avg_degree=10))
    b = make_synthetic(SyntheticSpec(num_nodes=2000, avg_degree=10))
    assert np.array_equal(a.col, b.col) and np.array_equal(a.x, b.x)
    assert a.num_nodes == 2000 and 7 < a.num_edges / a.num_nodes < 14
    assert np.all(np.diff(a.rowptr) >= 0) and a.col.max() < 2000
    assert len(set(a.train_idx) & set(a.test_idx)) == 0


def test_synthetic_options_and_errors():
    assert parse_synthetic("num_nodes=500,feature_noise=1.5").feature_noise == 1.5
    with pytest.raises(DatasetError, match="HINT"):
        parse_synthetic("nodes=5")
    assert dataset_key("synthetic:num_nodes=500") == "synthetic:num_nodes=500"
    assert dataset_key("synthetic:seed=0") == "synthetic"


@pytest.mark.parametrize("options, needle", [
    ("num_nodes=inf", "synthetic option num_nodes needs a finite number; got 'inf'. HINT: e.g. --dataset "
                      "synthetic:num_nodes=100000"),  # was an OverflowError
    ("num_nodes=1e400", "num_nodes needs a finite number; got '1e400'. HINT:"),
    ("seed=inf", "seed needs a finite number; got 'inf'. HINT: e.g. --dataset synthetic:seed=0"),
    ("train=nan", "train needs a finite number; got 'nan'. HINT:"),  # was a ValueError in _splits
    ("avg_degree=x", "avg_degree needs a finite number; got 'x'. HINT: e.g. --dataset synthetic:avg_degree=15"),
    ("train=2", "synthetic option train is a fraction in [0, 1]; got 2.0. HINT: e.g. --dataset synthetic:train=0.3"),
    ("train=-1", "train is a fraction in [0, 1]; got -1.0. HINT:"),
    ("intra=1.5", "intra is a fraction in [0, 1]; got 1.5. HINT: e.g. --dataset synthetic:intra=0.85"),
    ("train=0.8", "train+val+test are shares of the nodes; got 0.8+0.1+0.2 = 1.1, more than 1. HINT: lower some"),
    ("seed=-1", "synthetic option seed must be 0 or more; got -1. HINT: e.g. --dataset synthetic:seed=1"),
    ("val=0", "synthetic option val=0 leaves the val split empty; every split needs nodes. HINT: e.g. --dataset "
              "synthetic:val=0.1"),
])
def test_bad_synthetic_options_are_one_line_with_a_hint(options, needle):
    with pytest.raises(DatasetError) as err:
        parse_synthetic(options)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg and "HINT: " in msg, msg


def test_a_synthetic_graph_beyond_this_hosts_memory_is_refused_where_it_is_generated(tmp_path):
    """Refused by the rank that generates it (another host may have the memory), before a MemoryError; the
    features count where make_synthetic holds them whole, not where write_synthetic streams them."""
    from mpignn.data.synthetic import write_synthetic

    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    spec = parse_synthetic("avg_degree=1e9")  # parsing alone allocates nothing: every rank parses
    for generate in (lambda: make_synthetic(spec), lambda: write_synthetic(spec, tmp_path / "g")):
        with pytest.raises(DatasetError, match=r"generating it needs at least 745058\.1 GiB but this host has .*"
                                               r"HINT: fewer num_nodes"):
            generate()
    assert not (tmp_path / "g").exists()
    wide = parse_synthetic(f"num_nodes=1000,avg_degree=1,num_features={memory // 4000 + 1}")  # x alone > memory
    with pytest.raises(DatasetError, match="generating it needs at least"):
        make_synthetic(wide)
    from mpignn.data.synthetic import _start

    _start(wide)  # write_synthetic's start: x streams to disk in chunks, so it does not count


def test_synthetic_options_give_the_graph_they_gave_before():
    """Pinned digests (taken before the options were checked): valid options still give the same graph."""
    import hashlib

    spec = parse_synthetic("num_nodes=300,avg_degree=4,train=0.5,val=0.2,intra=1,label_noise=0,seed=7")
    assert spec == SyntheticSpec(num_nodes=300, avg_degree=4, train=0.5, val=0.2, intra=1.0, label_noise=0.0, seed=7)
    g = make_synthetic(spec)
    digest = hashlib.sha256(b"".join(a.tobytes() for a in (g.rowptr, g.col, g.x, g.y, g.train_idx, g.val_idx,
                                                            g.test_idx))).hexdigest()[:16]
    assert digest == "625fd66b7e0b4e40"  # at 062cf77, before parse_synthetic checked its options
    assert parse_synthetic("train=0.1,val=0.2,test=0.7").test == 0.7  # the shares may add up to 1


def test_unknown_dataset():
    with pytest.raises(DatasetError, match="unknown dataset 'Coraa'.*HINT"):
        load_dataset("Coraa")
    with pytest.raises(DatasetError, match="unknown dataset 'DBLP'.*IMDB"):  # the known list names IMDB
        load_dataset("DBLP")


@needs_shared
def test_cora_loads_offline_and_is_cached(tmp_path):
    shutil.copytree(SHARED / "datasets" / "Cora", tmp_path / "Cora")
    g = load_dataset("Cora", str(tmp_path))
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (2708, 10556, 1433, 7)
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (140, 500, 1000)
    assert (cache_dir(str(tmp_path), "Cora") / "meta.json").is_file()
    shutil.rmtree(tmp_path / "Cora")  # the second run needs only the cache
    again = load_dataset("cora", str(tmp_path))
    assert np.array_equal(again.col, g.col)


@pytest.mark.parametrize("spoil", [lambda m: m.pop("name"), lambda m: m.update(num_classes="abc"),
                                   lambda m: m.update(hetero={"junk": 1})], ids=["no name", "classes", "hetero"])
def test_a_cache_meta_json_with_spoilt_fields_is_rebuilt(tmp_path, spoil):
    shutil.copytree(SHARED / "datasets" / "Cora", tmp_path / "Cora")
    g = load_dataset("Cora", str(tmp_path))
    meta_path = cache_dir(str(tmp_path), "Cora") / "meta.json"
    meta = json.loads(meta_path.read_text())
    spoil(meta)
    meta_path.write_text(json.dumps(meta))
    again = load_dataset("Cora", str(tmp_path))  # rebuilt from the raw files, as for any other mismatch
    assert again.num_classes == 7 and np.array_equal(again.col, g.col)
    assert json.loads(meta_path.read_text())["name"] == "Cora"


def test_absent_dataset_offline_names_the_files(tmp_path):
    with pytest.raises(DatasetError, match=r"Cora is not under .*raw.*ind\.cora\.x.*HINT"):
        load_dataset("Cora", str(tmp_path))


@needs_tolokers
def test_tolokers_loads_offline_with_its_fixed_splits(tmp_path):
    shutil.copytree(SHARED / "datasets" / "tolokers", tmp_path / "tolokers")
    raw = np.load(tmp_path / "tolokers" / "raw" / "tolokers.npz")
    g = load_dataset("Tolokers", str(tmp_path))
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == (11758, 1038000, 10, 2)
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (5879, 2939, 2940)
    assert np.array_equal(g.train_idx, np.flatnonzero(raw["train_masks"][0]))  # split 0 by default
    assert np.array_equal(g.y, raw["node_labels"]) and np.allclose(g.x, raw["node_features"])
    assert (cache_dir(str(tmp_path), "Tolokers") / "meta.json").is_file()
    three = load_dataset("tolokers:split=3", str(tmp_path))
    assert three.name == dataset_key("Tolokers:split=3") == "Tolokers:split=3"
    assert np.array_equal(three.test_idx, np.flatnonzero(raw["test_masks"][3]))
    assert np.array_equal(three.col, g.col)
    assert dataset_key("TOLOKERS:split=0") == "Tolokers"  # same data, same cache and partitions


@pytest.mark.parametrize("name", ["Tolokers:split=10", "Tolokers:fold=1", "Tolokers:split=-1", "Cora:split=1"])
def test_dataset_options_are_checked(name):
    with pytest.raises(DatasetError, match=r"(split=K with K in 0\.\.9|unknown dataset).*HINT"):
        load_dataset(name)


def test_absent_tolokers_offline_names_the_file(tmp_path):
    with pytest.raises(DatasetError, match=r"Tolokers is not under .*tolokers/raw \(tolokers\.npz missing\).*HINT"):
        load_dataset("Tolokers", str(tmp_path))


@needs_tolokers
@pytest.mark.mpi
def test_one_rank_trains_on_tolokers(tmp_path):
    shutil.copytree(SHARED / "datasets" / "tolokers", tmp_path / "tolokers")
    rc, out = run_python(1, ["-m", "mpignn.train", "--dataset", "Tolokers", "--root", str(tmp_path),
                             "--epochs", "1", "--fanout", "5,5", "--batch-size", "512"], timeout=240)
    assert rc == 0, out[-3000:]
    accuracy = float(out.split("final test accuracy")[1].split()[0])
    assert 0.5 < accuracy <= 1.0, out[-2000:]  # binary, 78% of one class: a trained model is far from 0


def test_half_written_cache_is_ignored(tmp_path):
    folder = cache_dir(str(tmp_path), "Cora")
    folder.mkdir(parents=True)
    (folder / "rowptr.npy").write_bytes(b"garbage")  # a crash before meta.json was written
    with pytest.raises(DatasetError, match="not under"):
        load_dataset("Cora", str(tmp_path))


def _npz(tmp_path, **override):
    g = make_synthetic(SyntheticSpec(num_nodes=300, avg_degree=6, num_features=4))
    path = tmp_path / "g.npz"
    save_npz(str(path), g)
    arrays = dict(np.load(path))
    arrays.update(override)
    for key in [k for k, v in override.items() if v is None]:
        del arrays[key]
    np.savez(path, **arrays)
    return f"npz:{path}", g


def test_npz_round_trip(tmp_path):
    name, g = _npz(tmp_path)
    loaded = load_dataset(name)
    assert np.array_equal(loaded.col, g.col) and loaded.num_classes == g.num_classes


@pytest.mark.parametrize("override,needle", [
    ({"y": None}, "missing key"),
    ({"x": np.zeros((300, 4), dtype=np.int64)}, "x must be a float"),
    ({"edge_index": np.array([[0, 1], [1, 999]])}, "outside"),
    ({"x": np.full((300, 4), np.nan, dtype=np.float32)}, "NaN"),
    ({"train_idx": np.array([], dtype=np.int64)}, "train_idx is empty"),
    ({"edge_index": np.zeros((3, 4), dtype=np.int64)}, "edge_index must be"),
])
def test_malformed_npz(tmp_path, override, needle):
    name, _ = _npz(tmp_path, **override)
    with pytest.raises(DatasetError, match=needle) as info:
        load_dataset(name)
    assert "HINT" in str(info.value)


def test_npz_missing_file():
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset("npz:/nonexistent/graph.npz")


def test_row_normalisation_matches_pyg_and_leaves_the_input_alone(tmp_path):
    """`--feature-norm row` is PyG's NormalizeFeatures on non-negative features; zero rows stay zero, and a
    memory-mapped (read-only) table is copied, never written."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.transforms import NormalizeFeatures

    from mpignn.data.features import transform_rows

    rng = np.random.default_rng(0)
    x = (rng.random((300, 20)) < 0.2).astype(np.float32) * rng.integers(1, 4, (300, 20)).astype(np.float32)
    x[5] = 0
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    out = transform_rows(mapped, "row")
    ref = NormalizeFeatures()(Data(x=torch.from_numpy(x.copy()))).x.numpy()
    assert out.dtype == np.float32 and np.allclose(out, ref, atol=1e-7)
    assert not out[5].any() and np.array_equal(np.load(tmp_path / "x.npy"), x)
    assert transform_rows(x, "none") is x


@pytest.mark.parametrize("norm", ["none", "row"])
def test_half_precision_storage_rounds_as_torch_does(norm):
    """`--feature-dtype`: fp16 rows are numpy float16, bf16 rows are the bfloat16 bits torch's own conversion
    gives (uint16: numpy has no bfloat16), both after the row scaling."""
    import torch

    from mpignn.data.features import transform_rows

    rng = np.random.default_rng(1)
    x = (rng.standard_normal((200, 9)) * 10.0 ** rng.integers(-3, 4, (200, 1))).astype(np.float32)
    full = transform_rows(x, norm, "fp32")
    half = transform_rows(x, norm, "fp16")
    bf16 = transform_rows(x, norm, "bf16")
    assert half.dtype == np.float16 and np.array_equal(half, full.astype(np.float16))
    ref = torch.from_numpy(full).bfloat16()
    assert bf16.dtype == np.uint16 and torch.equal(torch.from_numpy(bf16).view(torch.bfloat16), ref)
    assert half.nbytes == bf16.nbytes == x.nbytes // 2
    assert transform_rows(x, "none", "fp32") is x
