"""Tier 1: partition folders: ownership, edges, round trips, METIS vs random, determinism, corruption."""
import json
import subprocess
import sys

import numpy as np
import pytest

from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.errors import ConfigError, PartitionFormatError
from mpignn.partition import check_matches, load_partition, partition_graph, read_meta


@pytest.fixture(scope="module")
def graph():
    return make_synthetic(SyntheticSpec(num_nodes=4000, avg_degree=10, num_features=6))


@pytest.fixture(scope="module")
def parts(graph, tmp_path_factory):
    out = tmp_path_factory.mktemp("p") / "metis4"
    rep = partition_graph(graph, 4, out, method="metis", seed=0, dataset="synthetic-test")
    return out, rep


def _load_all(folder, k):
    return [load_partition(folder, p) for p in range(k)]


def test_every_node_owned_once_and_edges_round_trip(graph, parts):
    folder, _ = parts
    loaded = _load_all(folder, 4)
    orig = np.concatenate([p.orig_id for p in loaded])
    assert np.array_equal(np.sort(orig), np.arange(graph.num_nodes))
    node_map = np.load(folder / "node_map.npy")
    inverse = np.empty_like(node_map)
    inverse[node_map] = np.arange(len(node_map))
    edges = set()
    for p in loaded:
        dst = np.repeat(np.arange(p.lo, p.hi), np.diff(p.rowptr))
        edges |= set(zip(inverse[p.col].tolist(), inverse[dst].tolist()))
        assert np.allclose(p.x, graph.x[p.orig_id]) and np.array_equal(p.y, graph.y[p.orig_id])
    ei = graph.edge_index()
    assert edges == set(zip(ei[0].tolist(), ei[1].tolist()))
    for split in ("train_idx", "val_idx", "test_idx"):
        got = np.sort(inverse[np.concatenate([getattr(p, split) for p in loaded])])
        assert np.array_equal(got, np.sort(getattr(graph, split)))


def test_metis_cuts_far_fewer_edges_than_random(graph, parts, tmp_path):
    _, metis = parts
    rnd = partition_graph(graph, 4, tmp_path / "r", method="random", seed=0)
    assert metis["edge_cut"] * 3 < rnd["edge_cut"], (metis["edge_cut"], rnd["edge_cut"])
    assert metis["train_balance"] < 1.1 and metis["node_balance"] < 1.1


def test_same_seed_same_partition(graph, parts, tmp_path):
    folder, _ = parts
    partition_graph(graph, 4, tmp_path / "again", method="metis", seed=0, dataset="synthetic-test")
    assert np.array_equal(np.load(folder / "node_map.npy"), np.load(tmp_path / "again" / "node_map.npy"))


def test_refuses_to_overwrite_without_force(graph, parts):
    with pytest.raises(ConfigError, match="--force"):
        partition_graph(graph, 4, parts[0], method="random")


def _copy(folder, tmp_path):
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(folder, dst)
    return dst


def test_truncated_part_file(parts, tmp_path):
    folder = _copy(parts[0], tmp_path)
    path = folder / "part-001" / "col.npy"
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(PartitionFormatError, match="truncated"):
        load_partition(folder, 1)
    load_partition(folder, 0)  # other parts still load


def test_checksum_failure(parts, tmp_path):
    folder = _copy(parts[0], tmp_path)
    path = folder / "part-002" / "x.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(PartitionFormatError, match="checksum"):
        load_partition(folder, 2)


def test_missing_part_and_missing_meta(parts, tmp_path):
    import shutil

    folder = _copy(parts[0], tmp_path)
    shutil.rmtree(folder / "part-003")
    with pytest.raises(PartitionFormatError, match="missing"):
        load_partition(folder, 3)
    (folder / "META.json").unlink()
    with pytest.raises(PartitionFormatError, match="no META.json"):
        read_meta(folder)


def test_mismatched_world_size_and_dataset(parts):
    meta = read_meta(parts[0])
    with pytest.raises(PartitionFormatError, match="mpirun -np 4"):
        check_matches(meta, parts[0], num_parts=2)
    with pytest.raises(PartitionFormatError, match="made for dataset"):
        check_matches(meta, parts[0], dataset="Cora")


def test_cli_prints_report_and_meta(tmp_path):
    out = tmp_path / "parts"
    res = subprocess.run([sys.executable, "-m", "mpignn.partition", "--dataset",
                          "synthetic:num_nodes=3000,avg_degree=8", "--num-parts", "2", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "edge cut" in res.stdout and "balance" in res.stdout
    meta = json.loads((out / "META.json").read_text())
    assert meta["num_parts"] == 2 and (out / "part-001" / "x.npy").is_file()
    again = subprocess.run([sys.executable, "-m", "mpignn.partition", "--num-parts", "2", "--out", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "already exists" in again.stderr and "Traceback" not in again.stderr
