"""Prepared data is keyed by content, not by path (issue 42, item 4).

A byte-identical copy of a prepared `--root` at another path (mtimes changed, as `cp` without -p does) is reused
as it is: nothing is partitioned again and nothing is written into it (it may be read-only). A `--partitions`
folder records its source's fingerprint, and a changed source is refused in one line, on every rank."""
import json
import logging
import os
import re
import shutil
import time

import numpy as np
import pytest

from _graphs import needs_cora, small_graph
from _mpirun import ROOT, SHARED, run_cli_here, run_cli_many, run_python
from mpignn.data import dataset_source, load_dataset, save_npz
from mpignn.data.cache import fingerprint

def _load(rt, dataset, root, **options):
    from mpignn import runtime

    return runtime.load_local_graph(rt, dataset, str(root), fanout=[2], cache_size=0, **options)


def _listing(top):
    """Every file and folder under `top` with its size and mtime: what a read-only copy must keep."""
    out = {}
    for folder, subfolders, files in os.walk(top):
        for name in subfolders + files:
            st = os.stat(os.path.join(folder, name))
            out[os.path.relpath(os.path.join(folder, name), top)] = (st.st_size, st.st_mtime_ns)
    return out


def _copy(src, dst):
    """A byte-identical copy with new mtimes (`cp -r`, rsync without -t), then write-protected. Tests run as
    root, whom chmod does not stop, so callers compare `_listing` before and after instead."""
    shutil.copytree(src, dst)
    later = time.time_ns() + 10**9
    for folder, _, files in os.walk(dst):
        for name in files:
            os.utime(os.path.join(folder, name), ns=(later, later))
    for folder, subfolders, files in os.walk(dst):
        for name in files:
            os.chmod(os.path.join(folder, name), 0o444)
        os.chmod(folder, 0o555)


def _unprotect(top):
    for folder, _, _ in os.walk(top):
        os.chmod(folder, 0o755)


def test_fingerprint_is_content_only(tmp_path):
    a = tmp_path / "a" / "graph.npz"
    a.parent.mkdir()
    save_npz(str(a), small_graph(200, 0))
    b = tmp_path / "elsewhere" / "renamed.npz"
    b.parent.mkdir()
    shutil.copyfile(a, b)
    os.utime(b, ns=(1, 1))  # another mtime
    assert fingerprint(a) == fingerprint(b)
    assert dataset_source(f"npz:{a}") == dataset_source(f"npz:{b}")
    rel = os.path.relpath(a)
    assert dataset_source(f"npz:{rel}") == dataset_source(f"npz:{a}")  # relative or absolute: one key
    data = bytearray(a.read_bytes())
    data[len(data) // 2] ^= 1  # the same size, one bit other
    b.write_bytes(bytes(data))
    assert fingerprint(a) != fingerprint(b)


def test_a_copied_root_with_its_npz_inside_is_reused_untouched(rt, tmp_path, caplog):
    root = tmp_path / "root"
    root.mkdir()
    save_npz(str(root / "graph.npz"), small_graph(300, 0))
    with caplog.at_level(logging.INFO, logger="mpignn.partition.source"):
        first = _load(rt, f"npz:{root / 'graph.npz'}", root)
    assert "partitioned" in caplog.text  # what a second partitioning would log
    caplog.clear()
    copy = tmp_path / "copy"
    _copy(root, copy)
    before = _listing(copy)
    try:
        caplog.clear()  # earlier tests may have set this logger to INFO: only the second load counts
        with caplog.at_level(logging.INFO, logger="mpignn.partition.source"):
            again = _load(rt, f"npz:{copy / 'graph.npz'}", copy)
        assert "partitioned" not in caplog.text, "the copy was partitioned again"
        assert again.folder == copy / first.folder.relative_to(root)
        assert _listing(copy) == before, "something was written into the (read-only) copy"
        assert np.array_equal(np.asarray(again.part.y), np.asarray(first.part.y))
    finally:
        _unprotect(copy)


def test_a_copied_root_with_the_npz_outside_and_moved_is_reused_untouched(rt, tmp_path, caplog, monkeypatch):
    (tmp_path / "data").mkdir()
    save_npz(str(tmp_path / "data" / "graph.npz"), small_graph(300, 1))
    monkeypatch.chdir(tmp_path)
    first = _load(rt, "npz:data/graph.npz", tmp_path / "root")  # a relative name
    _copy(tmp_path / "root", tmp_path / "copy")
    (tmp_path / "moved").mkdir()
    shutil.copyfile(tmp_path / "data" / "graph.npz", tmp_path / "moved" / "g.npz")  # a new path and mtime
    before = _listing(tmp_path / "copy")
    try:
        caplog.clear()  # earlier tests may have set this logger to INFO: only the second load counts
        with caplog.at_level(logging.INFO, logger="mpignn.partition.source"):
            again = _load(rt, f"npz:{tmp_path / 'moved' / 'g.npz'}", tmp_path / "copy")  # an absolute name
        assert "partitioned" not in caplog.text, "the copy was partitioned again"
        assert again.folder == tmp_path / "copy" / first.folder.relative_to(tmp_path / "root")
        assert _listing(tmp_path / "copy") == before, "something was written into the (read-only) copy"
    finally:
        _unprotect(tmp_path / "copy")


@needs_cora
def test_a_copied_public_root_keeps_its_cache_and_partition(rt, tmp_path, caplog):
    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(SHARED / "datasets" / "Cora", root / "Cora")
    first = _load(rt, "Cora", root)  # caches the parsed graph, then partitions it
    copy = tmp_path / "copy"
    _copy(root, copy)
    before = _listing(copy)
    try:
        caplog.clear()  # earlier tests may have set this logger to INFO: only the second load counts
        with caplog.at_level(logging.INFO):
            again = _load(rt, "Cora", copy)
            load_dataset("Cora", str(copy))  # the cache, as it is
        assert "partitioned" not in caplog.text and "rebuilding" not in caplog.text, caplog.text
        assert again.folder == copy / first.folder.relative_to(root)
        assert _listing(copy) == before, "something was written into the (read-only) copy"
    finally:
        _unprotect(copy)


def _partition(npz, out, root, parts=2, cwd=None):
    code, printed = run_cli_here("mpignn.partition", ["--dataset", f"npz:{npz}", "--root", root, "--num-parts",
                                                       parts, "--method", "random", "--out", out], cwd=cwd or ROOT)
    assert code == 0, printed[-3000:]


def test_the_partition_cli_records_the_source(tmp_path):
    npz = tmp_path / "graph.npz"
    save_npz(str(npz), small_graph(300, 0))
    _partition(npz, tmp_path / "p", tmp_path)
    meta = json.loads((tmp_path / "p" / "META.json").read_text())
    assert meta["source"] == dataset_source(f"npz:{npz}")


def test_a_changed_source_is_refused_in_process(rt, tmp_path):
    from mpignn.errors import PartitionFormatError

    npz = tmp_path / "graph.npz"
    save_npz(str(npz), small_graph(300, 0))
    _partition(npz, tmp_path / "p", tmp_path, parts=1)
    save_npz(str(npz), small_graph(300, 5))  # the same nodes, other edges and features
    with pytest.raises(PartitionFormatError) as err:
        _load(rt, f"npz:{npz}", tmp_path, partitions=str(tmp_path / "p"))
    text = str(err.value)
    assert "\n" not in text and str(tmp_path / "p") in text and f"npz:{npz}" in text
    assert "HINT: partition it again: python -m mpignn.partition" in text and "--force" in text


def test_an_old_folder_without_a_source_still_trains_with_a_warning(rt, tmp_path, caplog):
    npz = tmp_path / "graph.npz"
    save_npz(str(npz), small_graph(300, 0))
    _partition(npz, tmp_path / "p", tmp_path, parts=1)
    meta_path = tmp_path / "p" / "META.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("source", None)  # as an older mpignn wrote it
    meta_path.write_text(json.dumps(meta))
    save_npz(str(npz), small_graph(300, 5))  # nothing recorded, nothing to refuse by
    with caplog.at_level(logging.WARNING, logger="mpignn.partition.source"):
        graph = _load(rt, f"npz:{npz}", tmp_path, partitions=str(tmp_path / "p"))
    assert graph.part.meta.num_nodes == 300
    assert "records no fingerprint" in caplog.text


def test_the_same_content_typed_as_another_path_is_accepted(rt, tmp_path):
    npz = tmp_path / "graph.npz"
    save_npz(str(npz), small_graph(300, 0))
    _partition("graph.npz", tmp_path / "p", tmp_path, parts=1, cwd=tmp_path)  # made from a relative name
    graph = _load(rt, f"npz:{npz}", tmp_path, partitions=str(tmp_path / "p"))  # trained with an absolute one
    assert graph.part.meta.num_nodes == 300


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory):
    """One 2-rank job: the first training in root/, and one with a partition folder of an npz regenerated since
    (refused); {name: (exit codes, output)} and their folder."""
    base = tmp_path_factory.mktemp("by_content")
    root = base / "root"
    root.mkdir()
    save_npz(str(root / "graph.npz"), small_graph(400, 0))
    npz = base / "graph.npz"
    save_npz(str(npz), small_graph(400, 0))
    _partition(npz, base / "p", base)
    save_npz(str(npz), small_graph(400, 7))  # regenerated: the same node count, other edges
    runs = run_cli_many(2, {"first": _train_args(root),
                            "regenerated": ["mpignn.train", "--dataset", f"npz:{npz}", "--root", base,
                                            "--partitions", base / "p", "--epochs", "1"]}, base / "out")
    return base, runs


def _train_args(top):
    return ["mpignn.train", "--dataset", f"npz:{top / 'graph.npz'}", "--root", top, "--epochs", "1", "--fanout",
            "2,2", "--hidden", "16"]


@pytest.mark.mpi
def test_a_copied_root_is_reused_by_training_on_two_ranks(two_rank_runs):
    base, runs = two_rank_runs
    codes, out = runs["first"]
    assert codes == [0, 0] and "partitioned" in out, out[-3000:]
    copy = base / "copy"
    _copy(base / "root", copy)
    before = _listing(copy)
    try:
        rc, out = run_python(2, ["-m", *map(str, _train_args(copy))], timeout=120)
        assert rc == 0, out[-3000:]
        assert "partitioned" not in out, out[-3000:]
        assert _listing(copy) == before, "something was written into the (read-only) copy"
    finally:
        _unprotect(copy)


@pytest.mark.mpi
def test_a_regenerated_npz_is_refused_on_every_rank(two_rank_runs):
    base, runs = two_rank_runs
    npz = base / "graph.npz"
    codes, out = runs["regenerated"]
    assert codes == [1, 1], f"exit codes {codes}\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    lines = re.findall(r"mpignn: error: \[rank (\d)\] (?:rank 0: )?(expected \S+ to be partitioned from npz:\S+ as "
                       r"it is now.*?HINT: partition it again: python -m mpignn\.partition .*?--force \(or a new "
                       r"--out\))", out)
    assert {r for r, _ in lines} == {"0", "1"}, out[-3000:]
    assert all(str(base / "p") in m and f"npz:{npz}" in m for _, m in lines), lines


@pytest.mark.parametrize("recorded,now,expect", [
    ("npz|aaaa", "npz|aaaa", True),  # the same content, whatever its path
    (None, "npz|bbbb", False),  # an older mpignn's folder: nothing to compare
    ("npz|aaaa", None, False),  # the files are not on this host
    ("Cora", "Cora|cccc", False),  # partitioned from a cache whose raw files were gone: no fingerprint then
    ("npz|aaaa", "Cora|cccc", False),  # another dataset: check_matches names it
    ("synthetic", "synthetic:num_nodes=5", False),  # canonical parameters: check_matches compares them
    ("npz|aaaa", "npz|bbbb", "refused"),
    ("Cora|cccc", "Cora|dddd", "refused"),  # replaced raw files
])
def test_check_source_cases(tmp_path, recorded, now, expect):
    from mpignn.errors import PartitionFormatError
    from mpignn.partition.format import PartitionMeta, check_source

    meta = PartitionMeta(dataset="d", method="random", seed=0, num_parts=2, num_nodes=4, num_edges=0,
                         num_features=1, num_classes=2, part_offsets=(0, 2, 4), edge_cut=0, parts=({}, {}),
                         source=recorded)
    if expect == "refused":
        with pytest.raises(PartitionFormatError, match="--num-parts 2 --method random --seed 0 --out"):
            check_source(meta, tmp_path / "p", now, "npz:x.npz", "data")
    else:
        assert check_source(meta, tmp_path / "p", now, "npz:x.npz", "data") is expect
