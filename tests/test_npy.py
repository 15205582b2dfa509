"""Tier 1: the npy folder format, streaming npy files, the counting-sort CSR and the chunked synthetic writer."""
import json

import numpy as np
import pytest

from mpignn.data import load_dataset
from mpignn.data.graph import csr_from_edges, is_symmetric, symmetrized
from mpignn.data.npy import load_npy_folder
from mpignn.data.npyio import NpyWriter, iter_chunks, read_rows, release_pages
from mpignn.data.synthetic import SyntheticSpec, make_synthetic, write_synthetic
from mpignn.errors import DatasetError

KEYS = ("rowptr", "col", "x", "y", "train_idx", "val_idx", "test_idx")


def _reference_csr(src, dst, n, drop_self_loops=False):
    """The former implementation: sort int64 keys, drop repeats."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if drop_self_loops:
        src, dst = src[src != dst], dst[src != dst]
    key = np.unique(dst * n + src)
    rowptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(key // n, minlength=n), out=rowptr[1:])
    return rowptr, key % n


@pytest.mark.parametrize("n,m", [(1, 0), (7, 60), (500, 8000)])
def test_counting_sort_csr_matches_key_sort(n, m):
    rng = np.random.default_rng(n)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    for drop in (False, True):
        got = csr_from_edges(src.astype(np.int32), dst, n, drop_self_loops=drop)
        want = _reference_csr(src, dst, n, drop)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)) and got[1].dtype == np.int64
        got = csr_from_edges(src, dst, n, drop_self_loops=drop, symmetric=True)
        want = _reference_csr(np.concatenate([src, dst]), np.concatenate([dst, src]), n, drop)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))


def test_symmetrized_builds_from_csr_and_passes_symmetric_graphs_through():
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 300, 3000), rng.integers(0, 300, 3000)
    rowptr, col = csr_from_edges(src, dst, 300)
    assert not is_symmetric(rowptr, col)
    sym = symmetrized(rowptr, col)
    want = csr_from_edges(src, dst, 300, symmetric=True, drop_self_loops=True)
    assert all(np.array_equal(a, b) for a, b in zip(sym, want)) and is_symmetric(*sym)
    assert symmetrized(*sym)[1] is sym[1]  # no copy when already undirected
    for v in (0, 150, 299):  # one edge taken out of a symmetric graph: rows still sorted, symmetry gone
        rowptr2, col2 = sym[0].copy(), np.delete(sym[1], sym[0][v])
        rowptr2[v + 1:] -= 1
        assert not is_symmetric(rowptr2, col2)
    rowptr3, col3 = sym[0], sym[1].copy()
    col3[rowptr3[5]] = 5  # a self loop
    assert not is_symmetric(rowptr3, col3)


def test_writer_and_row_reads_through_files(tmp_path):
    data = np.arange(70, dtype=np.float32).reshape(10, 7)
    with NpyWriter(tmp_path / "a.npy", data.shape, np.float32) as w:
        for lo in range(0, 10, 3):
            w.write(data[lo:lo + 3])
            w.write(data[lo:lo])  # a chunk where a part has no rows
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    assert np.array_equal(np.load(tmp_path / "a.npy"), data)
    assert np.array_equal(read_rows(mapped, 2, 9), data[2:9]) and not isinstance(read_rows(mapped, 2, 9), np.memmap)
    assert np.array_equal(np.concatenate([c for _, c in iter_chunks(mapped, 4)]), data)
    release_pages(mapped)
    release_pages(data)  # no-op
    assert np.array_equal(mapped[3], data[3])
    with pytest.raises(ValueError, match="2 rows written, 5 declared"):
        with NpyWriter(tmp_path / "b.npy", (5, 7), np.float32) as w:
            w.write(data[:2])


def test_write_synthetic_is_make_synthetic_with_mapped_features(tmp_path):
    spec = SyntheticSpec(num_nodes=3000, avg_degree=10, num_features=6, seed=2)
    want = make_synthetic(spec)
    got = load_npy_folder(write_synthetic(spec, tmp_path / "g"))
    assert isinstance(got.x, np.memmap) and got.name == "synthetic" and got.num_classes == want.num_classes
    for key in KEYS:
        assert np.array_equal(getattr(got, key), getattr(want, key)), key


def test_synthetic_structure_unchanged():
    """The leaner generator draws what the one-shot code drew: pinned by a digest of the default-spec graph
    at 5000 nodes, computed with the earlier code."""
    g = make_synthetic(SyntheticSpec(num_nodes=5000))
    assert (g.num_edges, int(g.col[:1000].sum()), int(g.y.sum()), len(g.train_idx)) == \
        (72752, 2453611, 14947, 1500)
    assert float(g.x[17, 3]) == pytest.approx(0.2942274808883667)


def _folder(tmp_path, form="edge_index", **override):
    g = make_synthetic(SyntheticSpec(num_nodes=400, avg_degree=6, num_features=3))
    folder = tmp_path / f"g-{form}"
    folder.mkdir()
    ei = g.edge_index()
    arrays = {"x": g.x, "y": g.y, "train_idx": g.train_idx, "val_idx": g.val_idx, "test_idx": g.test_idx}
    arrays.update({"edge_index": {"edge_index": ei}, "src": {"src": ei[0], "dst": ei[1]},
                   "rowptr": {"rowptr": g.rowptr, "col": g.col}}[form])
    arrays.update(override)
    for key, value in arrays.items():
        if value is not None:
            np.save(folder / f"{key}.npy", value)
    return g, folder


@pytest.mark.parametrize("form", ["edge_index", "src", "rowptr"])
def test_npy_folder_edge_forms_load_the_same_graph(tmp_path, form):
    g, folder = _folder(tmp_path, form)
    got = load_dataset(f"npy:{folder}")
    assert isinstance(got.x, np.memmap) and got.num_classes == g.num_classes
    for key in KEYS:
        assert np.array_equal(getattr(got, key), getattr(g, key)), key


@pytest.mark.parametrize("override,match", [
    ({"y": None}, "missing y.npy"),
    ({"x": np.ones((400, 3))}, r"x.npy must be a float32 \[N, F\] array; got float64"),
    ({"train_idx": np.zeros(400, dtype=bool)}, "not a mask"),
    ({"y": np.array([object()] * 400)}, "never loads"),
    ({"edge_index": np.zeros((5, 2), dtype=np.int64)}, "save edge_index.T"),
    ({"edge_index": np.array([[0, 1], [2, 400]])}, r"outside \[0, 400\)"),
    ({"x": np.full((400, 3), np.nan, dtype=np.float32)}, "NaN"),
    ({"x": np.where(np.eye(400, 3, -123) > 0, np.inf, 1).astype(np.float32)},
     r"x\.npy has NaN or infinite values \(as float32\), e\.g\. in row 123\."),
    ({"src": np.array([1, 2])}, "exactly one form"),
    ({"val_idx": np.array([0, 1, 1])}, "each node once"),
    ({"y": np.full(400, -2)}, r"got -1 from y.max\(\) \+ 1"),
])
def test_npy_folder_errors_name_the_file_and_fix(tmp_path, override, match):
    _, folder = _folder(tmp_path, **override)
    with pytest.raises(DatasetError, match=match) as err:
        load_npy_folder(folder)
    assert "HINT:" in str(err.value) and "\n" not in str(err.value)


def test_npy_folder_meta_and_shared_splits(tmp_path):
    g, folder = _folder(tmp_path)
    (folder / "meta.json").write_text(json.dumps({"num_classes": 12, "name": "mine"}))
    got = load_npy_folder(folder)
    assert (got.name, got.num_classes) == ("mine", 12)
    (folder / "meta.json").write_text("[1]")
    with pytest.raises(DatasetError, match="JSON object"):
        load_npy_folder(folder)
    for bad, shown in (('"abc"', "'abc'"), ("null", "None"), ("2.7", "2.7"), ("true", "True")):
        (folder / "meta.json").write_text(f'{{"num_classes": {bad}}}')  # not a traceback, nor a silent int(2.7)
        with pytest.raises(DatasetError, match=f"num_classes must be a JSON integer; got {shown}"):
            load_npy_folder(folder)
    (folder / "meta.json").unlink()
    np.save(folder / "test_idx.npy", g.train_idx[:3])
    with pytest.raises(DatasetError, match="train_idx and test_idx share 3 node"):
        load_npy_folder(folder)
    with pytest.raises(DatasetError, match="does not exist"):
        load_npy_folder(tmp_path / "nowhere")
