"""Contents checked before any kernel (issue #25 item 2): a partition folder crafted so that its sha256 sums
match its own META.json is still refused, with PartitionFormatError naming the file and the fault, when it
breaks what the sampling kernels and loaders index with; on 2 ranks every rank says so and exits 1."""
import hashlib
import json
import re
import shutil

import numpy as np
import pytest

from _mpirun import run_python
from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.data.synthetic_hetero import make_user_item
from mpignn.errors import PartitionFormatError
from mpignn.partition import load_partition, partition_graph, validate
from mpignn.partition.deliver import held_by_hosts
from mpignn.partition.links import has_link_split, load_link_split

SMALL = "synthetic:num_nodes=2000,avg_degree=6,num_features=4"
LINKS = {"val": 0.1, "test": 0.1, "num_tails": 5, "seed": 0}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("contents")
    graph = make_synthetic(SyntheticSpec(num_nodes=2000, avg_degree=6, num_features=4))
    partition_graph(graph, 2, root / "p2", method="random", dataset=SMALL)
    partition_graph(graph, 2, root / "links", method="random", dataset=SMALL, links=LINKS)
    partition_graph(make_user_item(num_items=600, num_users=150), 2, root / "hetero", method="random")
    return root


def _craft(src, dst, part, name, change):
    """Copy `src`, replace part `part`'s `name`.npy by change(array), and re-record its size and sha256 in
    META.json, so the size and checksum checks pass."""
    shutil.copytree(src, dst)
    path = dst / f"part-{part:03d}" / f"{name}.npy"
    array = change(np.load(path))
    with open(path, "wb") as f:
        np.save(f, array, allow_pickle=False)
    meta = json.loads((dst / "META.json").read_text())
    meta["parts"][part]["files"][name] = {"bytes": path.stat().st_size,
                                          "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    (dst / "META.json").write_text(json.dumps(meta))
    return dst


def _set(index, value):
    def change(a):
        a[index] = value
        return a
    return change


FAULTS = {  # name: (file, change, fault named in the message)
    "rowptr falls": ("rowptr", lambda a: np.concatenate([a[:1], a[1:-1][::-1], a[-1:]]), "never decreasing"),
    "rowptr end": ("rowptr", _set(-1, -3), "from 0 to"),
    "col 1e12": ("col", _set(5, 10**12), "got 1000000000000 at index 5"),
    "col -7": ("col", _set(-1, -7), "got -7 at index"),
    "col int64 min": ("col", _set(0, -2**63), "got -9223372036854775808 at index 0"),
    "split id int64 max": ("val_idx", _set(0, 2**63 - 1), "got 9223372036854775807 at index 0"),
    "label 99": ("y", _set(3, 99), "labels (-1: unlabelled) in [-1, 8), got 99 at index 3"),
    "label -5": ("y", _set(0, -5), "got -5 at index 0"),
    "split id of another part": ("train_idx", _set(0, 0), "ids owned by part 1 in [1000, 2000), got 0"),
    "split id past N": ("test_idx", _set(-1, 2000), "ids owned by part 1"),
    "x float64": ("x", lambda a: a.astype(np.float64), "expected dtype <f4 (float32), got <f8"),
    "x width": ("x", lambda a: a[:, :3].copy(), "expected shape (1000, 4), got (1000, 3)"),
    "x Fortran order": ("x", np.asfortranarray, "rows in C order"),
    "col int32": ("col", lambda a: a.astype(np.int32), "expected dtype <i8 (int64), got <i4"),
    "rowptr big-endian": ("rowptr", lambda a: a.astype(">i8"), "got >i8"),
    "y 2-D": ("y", lambda a: a.reshape(-1, 1), "expected shape (1000,), got (1000, 1)"),
    "orig_id past N": ("orig_id", _set(7, 5000), "original ids in [0, 2000), got 5000 at index 7"),
    "halo unsorted": ("halo_gid", lambda a: a[::-1].copy(), "sorted and unique"),
    "halo own id": ("halo_gid", lambda a: np.sort(np.append(a[1:], 1500)), "own id 1500"),
    "halo_deg zero": ("halo_deg", _set(2, 0), "edge counts in [1, "),
    "col 0-d": ("col", lambda a: np.array(a[0]), "got ()"),
    "halo_gid 0-d": ("halo_gid", lambda a: np.array(a[0]), "got ()"),
    "rowptr 0-d": ("rowptr", lambda a: np.array(a[0]), "expected shape (1001,), got ()"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_checksum_valid_crafted_part_is_refused(folders, tmp_path, fault):
    name, change, needle = FAULTS[fault]
    crafted = _craft(folders / "p2", tmp_path / "c", 1, name, change)
    with pytest.raises(PartitionFormatError) as err:
        load_partition(crafted, 1, mmap=True)
    message = str(err.value)
    assert f"part-001/{name}.npy" in message and needle in message and "HINT" in message, message
    assert "\n" not in message
    load_partition(crafted, 0, mmap=True)  # the other part is intact and still loads


def test_unlabelled_split_node_is_refused(folders, tmp_path):
    part = load_partition(folders / "p2", 1)
    y = part.y.copy()
    y[part.train_idx[0] - part.lo] = -1  # -1 is allowed for unlabelled nodes, never inside a split
    crafted = _craft(folders / "p2", tmp_path / "c", 1, "y", lambda a: y)
    with pytest.raises(PartitionFormatError, match=r"part-001/train_idx\.npy: expected labelled nodes"):
        load_partition(crafted, 1)


def test_checks_scan_big_arrays_in_chunks(folders, tmp_path, monkeypatch):
    """With tiny chunks the scan still finds a bad id in the last chunk, at its index, and passes good parts."""
    monkeypatch.setattr(validate, "CHUNK", 7)
    for part in (0, 1):
        for verify in (True, False):  # ids range-checked during the checksum read, or by the chunked scan
            load_partition(folders / "p2", part, mmap=True, verify=verify)
            load_partition(folders / "hetero", part, mmap=True, verify=verify)
    crafted = _craft(folders / "p2", tmp_path / "c", 0, "col", _set(-1, 2000))
    n = len(np.load(crafted / "part-000" / "col.npy"))
    for verify in (True, False):
        with pytest.raises(PartitionFormatError, match=rf"part-000/col\.npy: expected node ids in \[0, 2000\), "
                                                       rf"got 2000 at index {n - 1}\."):
            load_partition(crafted, 0, mmap=True, verify=verify)


@pytest.mark.parametrize("array", [np.array([3, -1, 7]), np.arange(100_003), np.arange(5, dtype=np.int32),
                                   np.zeros(0, np.int64), np.asfortranarray(np.ones((3, 3), np.int64))])
def test_checksum_read_also_gives_the_unsigned_max(tmp_path, array):
    """One read gives the same sha256 as the plain checksum, and the max of int64 files read unsigned
    (a negative id is huge), across chunk edges; None where the file is no C-order int64 array."""
    from mpignn.fileio import sha256_file

    path = tmp_path / "a.npy"
    np.save(path, array, allow_pickle=False)
    digest, top = validate.sha256_and_max(path, chunk=4096)
    assert digest == sha256_file(path)
    c_int64 = array.dtype == np.int64 and array.flags.c_contiguous and array.ndim == 1
    assert top == (int(array.view(np.uint64).max(initial=0)) if c_int64 else None)


def test_meta_part_offsets_are_checked(folders, tmp_path):
    crafted = tmp_path / "c"
    shutil.copytree(folders / "p2", crafted)
    meta = json.loads((crafted / "META.json").read_text())
    meta["part_offsets"] = [0, 1500, 1000]
    (crafted / "META.json").write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match=r"META\.json: expected part_offsets rising from 0 to "
                                                   r"num_nodes=2000"):
        load_partition(crafted, 0)


def _swap_edge_source(folder):
    """A col change that puts an item where the 'rated_by' runs need users (the first item row's first
    user -> item edge now comes from that item itself)."""
    def change(col):
        tptr = np.load(folder / "part-001" / "type_rowptr.npy")
        lo = json.loads((folder / "META.json").read_text())["part_offsets"][1]
        col[tptr[1]] = lo  # row 0 (id lo, an item): runs [rates: tptr0..tptr1) [rated_by: tptr1..tptr2)
        return col
    return change


def test_heterogeneous_type_runs_are_checked(folders, tmp_path):
    src = folders / "hetero"
    tptr = np.load(src / "part-001" / "type_rowptr.npy")
    assert tptr[2] > tptr[1] and tptr[1] == tptr[0], "the first row should be an item with user in-edges"
    cases = [
        ("type_rowptr", lambda a: a[:-1].copy(), "type_rowptr.npy: expected shape"),
        ("type_rowptr", _set(1, 1), "expected no edges of type item__rates__user into row 0 (a item)"),
        ("type_rowptr", _set(2, tptr[2] - 1), "expected row 1's runs to start at rowptr[1]"),
        ("type_rowptr", _set(slice(1, 3), [2, 1]), "never decreasing"),
        ("col", _swap_edge_source(src), "col.npy: expected sources of type user in the user__rated_by__item runs"),
    ]
    for k, (name, change, needle) in enumerate(cases):
        crafted = _craft(src, tmp_path / f"c{k}", 1, name, change)
        with pytest.raises(PartitionFormatError) as err:
            load_partition(crafted, 1)
        assert f"part-001/{name}" in str(err.value) and needle in str(err.value), (needle, str(err.value))
    crafted = tmp_path / "counts"
    shutil.copytree(src, crafted)
    meta = json.loads((crafted / "META.json").read_text())
    meta["parts"][1]["type_counts"][0] += 5
    (crafted / "META.json").write_text(json.dumps(meta))
    with pytest.raises(PartitionFormatError, match=r"parts\[1\]\.type_counts"):
        load_partition(crafted, 1)


@pytest.mark.parametrize("name,change,needle", [
    ("val_pos", _set((1, 0), 10**12), "val_pos.npy: expected node ids in [0, 2000), got 1000000000000"),
    ("test_neg", _set((0, 1), -4), "test_neg.npy: expected node ids in [0, 2000), got -4"),
    ("test_neg_tails", lambda a: a[1:].copy(), "test_neg_tails.npy: expected shape ("),
    ("val_neg", lambda a: a.astype(np.float64), "val_neg.npy: expected dtype <i8"),
])
def test_held_out_link_arrays_are_checked(folders, tmp_path, name, change, needle):
    crafted = tmp_path / "c"
    shutil.copytree(folders / "links", crafted)
    offsets = np.asarray(json.loads((crafted / "META.json").read_text())["part_offsets"])
    load_link_split(crafted, offsets, 0)
    path = crafted / "links" / f"{name}.npy"
    array = change(np.load(path))
    with open(path, "wb") as f:
        np.save(f, array, allow_pickle=False)
    with pytest.raises(PartitionFormatError) as err:
        load_link_split(crafted, offsets, 0)
    assert needle in str(err.value) and "HINT" in str(err.value), str(err.value)


@pytest.mark.parametrize("torn", ['{"val": 0.1,', "\x00\x00"])
def test_a_corrupt_link_split_record_is_one_line_and_a_folder_not_held(folders, tmp_path, torn):
    from mpi4py import MPI

    def usable(folder):
        return has_link_split(folder, LINKS)

    crafted = tmp_path / "c"
    shutil.copytree(folders / "links", crafted)
    assert usable(crafted) and held_by_hosts(MPI.COMM_SELF, crafted, 0, usable)
    (crafted / "links" / "SPLIT.json").write_text(torn)
    with pytest.raises(PartitionFormatError) as err:  # --partitions: raised inside `checked`, so on every rank
        has_link_split(crafted, LINKS)
    message = str(err.value)
    assert message.startswith(f"{crafted}/links/SPLIT.json is corrupt (JSONDecodeError: ") and "\n" not in message
    assert message.endswith(f"HINT: delete {crafted}/links and partition again for --task link"), message
    # mpignn's own folder under --root: one whose record is unreadable is not held, so it is made again (with
    # --local-prep the folder is checked by `usable` instead, which refuses it in one line on every rank)
    assert not held_by_hosts(MPI.COMM_SELF, crafted, 0, usable)


@pytest.mark.mpi
def test_crafted_folder_fails_on_every_rank_with_exit_1(folders, tmp_path):
    crafted = _craft(folders / "p2", tmp_path / "c", 1, "col", _set(5, 10**12))
    rc, out = run_python(2, ["-m", "mpignn.train", "--dataset", SMALL, "--root", str(tmp_path),
                             "--partitions", str(crafted), "--epochs", "1"], timeout=120)
    assert rc == 1, f"rc={rc}\n{out[-3000:]}"
    assert "Traceback" not in out and "Segmentation" not in out, out[-3000:]
    # Hydra forwards each rank's output in chunks, so one rank's line can run into another's.
    lines = re.findall(r"mpignn: error: \[rank (\d)\] (.*?part-001/col\.npy: expected node ids in \[0, 2000\), "
                       r"got 1000000000000 at index 5\. HINT)", out)
    assert {r for r, _ in lines} == {"0", "1"}, out[-3000:]
