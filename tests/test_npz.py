"""Tier 1: every way an own-graph .npz can be wrong gets one line naming the key and the fix (README npz rules)."""
import io
import zipfile

import numpy as np
import pytest

from mpignn.data import load_dataset
from mpignn.errors import DatasetError

N = 50


def _base():
    rng = np.random.default_rng(0)
    return {"edge_index": rng.integers(0, N, size=(2, 200)), "x": rng.normal(size=(N, 3)).astype(np.float32),
            "y": rng.integers(0, 3, N), "train_idx": np.arange(20), "val_idx": np.arange(20, 30),
            "test_idx": np.arange(30, N)}


def _write(path, **override):
    arrays = _base()
    arrays.update(override)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return f"npz:{path}"


def _npy(array, header_shape=None):
    """The bytes of one .npy member; `header_shape` makes its header lie about the shape."""
    buf = io.BytesIO()
    if header_shape is None:
        np.save(buf, array)
    else:
        np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(array.dtype),
                                                   "fortran_order": False, "shape": header_shape})
        buf.write(array.tobytes())
    return buf.getvalue()


def _write_members(path, **members):
    """An npz whose members are raw bytes, for files np.savez cannot produce (lying or cut headers)."""
    arrays = _base()
    with zipfile.ZipFile(path, "w") as zf:
        for key, value in arrays.items():
            zf.writestr(f"{key}.npy", members.get(key, _npy(value)))
    return f"npz:{path}"


def _ids(*values):
    return np.array(values, dtype=np.int64)


labels_with_hole = np.zeros(N, dtype=np.int64)
labels_with_hole[25] = -1

BAD = {
    # keys
    "missing y": ({"y": None}, r"missing key\(s\) y; found edge_index, test_idx, train_idx, val_idx, x"),
    "absent val split": ({"val_idx": None}, r"missing key\(s\) val_idx"),
    # x
    "x int": ({"x": np.zeros((N, 3), dtype=np.int64)}, r"x must be a float \[N, F\] array; got int64"),
    "x bool": ({"x": np.zeros((N, 3), dtype=bool)}, r"x must be a float \[N, F\] array; got bool"),
    "x object": ({"x": np.array([[0.0]] * N, dtype=object)}, r"x must be a float .* got dtype object"),
    "x complex": ({"x": np.zeros((N, 3), dtype=np.complex64)}, r"x must be a float .* got complex64"),
    "x 1-D": ({"x": np.zeros(N, dtype=np.float32)},
              r"x must be a float \[N, F\] array; got float32 with shape \(50,\)\. HINT: x needs N >= 1 nodes and "
              r"F >= 1 features"),
    "x no features": ({"x": np.zeros((N, 0), dtype=np.float32)},
                      r"got float32 with shape \(50, 0\)\. HINT: x needs N >= 1 nodes and F >= 1 features"),
    "x no rows": ({"x": np.zeros((0, 3), dtype=np.float32)},
                  r"got float32 with shape \(0, 3\)\. HINT: x needs N >= 1 nodes"),
    "x NaN": ({"x": np.full((N, 3), np.nan, dtype=np.float32)},
              r"x has NaN or infinite values \(as float32\), e\.g\. in row 0\."),
    "x inf": ({"x": np.where(np.eye(N, 3, -7) > 0, np.inf, 0).astype(np.float32)},
              r"x has NaN or infinite values \(as float32\), e\.g\. in row 7\."),
    "x overflows float32": ({"x": np.full((N, 3), 1e300)}, r"x has NaN or infinite values \(as float32\)"),
    # y
    "y float": ({"y": np.zeros(N)}, r"y must be an int \(50,\) array; got float64"),
    "y bool": ({"y": np.zeros(N, dtype=bool)}, r"y must be an int \(50,\) array; got bool"),
    "y object": ({"y": np.array([0] * N, dtype=object)}, r"y must be an int .* got dtype object"),
    "y [N, 1]": ({"y": np.zeros((N, 1), dtype=np.int64)},
                 r"y must be an int \(50,\) array; got int64 with shape \(50, 1\)"),
    "y too short": ({"y": np.zeros(N - 1, dtype=np.int64)},
                    r"y must be an int \(50,\) array; got int64 with shape \(49,\)"),
    "y below -1": ({"y": np.where(np.arange(N) == 45, -2, np.arange(N) % 3)}, r"y must lie in \[-1, 3\) .* got min -2"),
    "y above num_classes": ({"y": np.arange(N) % 5, "num_classes": np.int64(3)},
                            r"y must lie in \[-1, 3\) \(-1 = unlabelled, num_classes from num_classes\); got min 0, "
                            r"max 4"),
    "unlabelled node in a split": ({"y": labels_with_hole, "num_classes": np.int64(2)},
                                   r"val_idx has 1 unlabelled node\(s\) \(y = -1\), e.g. 25"),
    # num_classes
    "num_classes float": ({"num_classes": np.float64(3)}, r"num_classes must be an int scalar array; got float64"),
    "num_classes vector": ({"num_classes": _ids(3, 3)}, r"num_classes must be an int scalar array; got int64 with "
                                                          r"shape \(2,\)"),
    "num_classes 1": ({"num_classes": np.int64(1), "y": np.zeros(N, dtype=np.int64)},
                      r"num_classes must be between 2 and the node count 50; got 1 from num_classes"),
    "num_classes absurd": ({"num_classes": np.int64(10**12)}, r"between 2 and the node count 50; got 1000000000000"),
    "no labels at all": ({"y": np.full(N, -1)}, r"got 0 from y.max\(\) \+ 1 \(no num_classes given\)"),
    # edge_index
    "edge_index float": ({"edge_index": np.zeros((2, 4))}, r"edge_index must be an int \[2, E\] array; got float64"),
    "edge_index [E, 2]": ({"edge_index": np.zeros((7, 2), dtype=np.int64)}, r"got int64 with shape \(7, 2\)\. "
                                                                             r"HINT: save edge_index.T"),
    "edge_index 3 rows": ({"edge_index": np.zeros((3, 4), dtype=np.int64)}, r"edge_index must be an int \[2, E\]"),
    "edge_index 1-D": ({"edge_index": np.zeros(4, dtype=np.int64)}, r"edge_index must be .* shape \(4,\)"),
    "edge id too large": ({"edge_index": np.array([[0, 1], [1, 70]])}, r"outside \[0, 50\): min 0, max 70"),
    "edge id negative": ({"edge_index": np.array([[0, -1], [1, 2]])}, r"outside \[0, 50\): min -1, max 2"),
    # splits
    "train_idx float": ({"train_idx": np.arange(20.0)}, r"train_idx must be an int 1-D array; got float64"),
    "train_idx is a mask": ({"train_idx": np.arange(N) < 20}, r"got bool .* HINT: train_idx holds node ids, not a "
                                                               r"mask: save np.flatnonzero\(mask\)"),
    "train_idx 2-D": ({"train_idx": np.arange(20).reshape(4, 5)}, r"train_idx must be an int 1-D array; got int64 with "
                                                                  r"shape \(4, 5\)"),
    "train_idx negative": ({"train_idx": _ids(-1, 0)}, r"train_idx has node ids outside \[0, 50\): min -1"),
    "test_idx too large": ({"test_idx": _ids(30, 50)}, r"test_idx has node ids outside \[0, 50\): min 30, max 50"),
    "train_idx repeated": ({"train_idx": _ids(0, 1, 2, 1)}, r"train_idx must list each node once; got 1 repeated "
                                                            r"id\(s\), e.g. 1\. HINT: save np.unique\(train_idx\)"),
    "test_idx repeated": ({"test_idx": _ids(40, 40, 41, 41)}, r"test_idx must list each node once; got 2"),
    "train and val overlap": ({"val_idx": _ids(19, 20)}, r"train_idx and val_idx share 1 node\(s\), e.g. 19"),
    "train and test overlap": ({"test_idx": _ids(5, 6, 45)}, r"train_idx and test_idx share 2 node\(s\), e.g. 5"),
    "val and test overlap": ({"test_idx": _ids(29, 31)}, r"val_idx and test_idx share 1 node\(s\), e.g. 29"),
    "empty train": ({"train_idx": _ids()}, r"train_idx is empty \(nothing to train on\)"),
    "empty val": ({"val_idx": _ids()}, r"val_idx is empty \(nothing to select the model on\)"),
    "empty test": ({"test_idx": _ids()}, r"test_idx is empty \(nothing to report the accuracy on\)"),
}


@pytest.mark.parametrize("override,needle", BAD.values(), ids=BAD.keys())
def test_malformed_npz_is_named_in_one_line(tmp_path, override, needle):
    name = _write(tmp_path / "g.npz", **override)
    with pytest.raises(DatasetError, match=needle) as info:
        load_dataset(name)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'g.npz'}: ") and "\n" not in message and ". HINT: " in message


x = np.zeros((N, 3), dtype=np.float32)
BAD_FILES = {
    "declares more memory than any host": ({"edge_index": _npy(np.zeros((2, 5), np.int64), header_shape=(2, 10**13))},
                                           r"the arrays need \d+\.\d GiB once read \(x \(50, 3\), "
                                           r"edge_index \(2, 10000000000000\)\) but this host has"),
    "truncated array": ({"x": _npy(x)[:-40]}, r"expected an npz of plain arrays .*; got x: ValueError: EOF"),
    "member that is not npy": ({"y": b"hello, not an array"}, r"key y is not a readable .npy array"),
}


@pytest.mark.parametrize("members,needle", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_broken_npz_members(tmp_path, members, needle):
    with pytest.raises(DatasetError, match=needle) as info:
        load_dataset(_write_members(tmp_path / "g.npz", **members))
    assert "\n" not in str(info.value) and "HINT" in str(info.value)


def test_not_a_zip(tmp_path):
    (tmp_path / "g.npz").write_bytes(b"PK but not really")
    with pytest.raises(DatasetError, match="not a readable .npz file.*HINT"):
        load_dataset(f"npz:{tmp_path / 'g.npz'}")


def test_object_arrays_are_never_unpickled(tmp_path, monkeypatch):
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("unpickled")

    # Warm the graph kernels first: numba reads its own on-disk cache of compiled code with pickle, which is
    # not what this test is about (it asks whether reading an npz unpickles anything).
    load_dataset(_write(tmp_path / "warm.npz"))
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    name = _write(tmp_path / "g.npz", x=np.array([[0.0]] * N, dtype=object))
    with pytest.raises(DatasetError, match="dtype object"):
        load_dataset(name)
    # an extra key is ignored without being read, whatever it holds
    name = _write(tmp_path / "h.npz", notes=np.array([{"a": 1}], dtype=object))
    assert load_dataset(name).num_nodes == N


def test_documented_acceptances(tmp_path):
    """What the README says is accepted: self loops kept, duplicate edges merged, no edges, unlabelled nodes
    outside the splits, any int / float width (converted), num_classes above the labels seen, extra keys."""
    edges = np.array([[0, 0, 1, 1, 3], [0, 2, 2, 2, 4]], dtype=np.uint32)  # (0,0) self loop, (1,2) twice
    y = (np.arange(N) % 2).astype(np.int16)
    y[N - 1] = -1  # unlabelled, outside every split
    g = load_dataset(_write(tmp_path / "g.npz", edge_index=edges, x=np.ones((N, 2)), y=y,
                            train_idx=np.arange(20, dtype=np.int32), test_idx=np.arange(30, N - 1, dtype=np.uint16),
                            num_classes=np.array([5]), extra=np.zeros(3)))
    assert g.num_edges == 4 and list(g.col[g.rowptr[0]:g.rowptr[1]]) == [0]  # self loop (0,0) kept
    assert list(g.col[g.rowptr[2]:g.rowptr[3]]) == [0, 1]  # (1,2) once
    assert g.num_classes == 5 and g.y[N - 1] == -1 and g.y.dtype == np.int64
    assert g.x.dtype == np.float32 and g.train_idx.dtype == g.test_idx.dtype == np.int64
    empty = load_dataset(_write(tmp_path / "e.npz", edge_index=np.zeros((2, 0), dtype=np.int64)))
    assert empty.num_edges == 0 and empty.num_nodes == N
