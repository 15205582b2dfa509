"""Tier 1: temporary names carry their process and host, and the next run that owns a folder removes what killed
runs of this host left beside it (a dead pid), never a live process's or another host's; delivery refuses to
replace a folder mpignn did not write unless --force (tests/test_multihost.py runs tests/mpi_workers/deliver_refuse.py)."""
import os
import subprocess
import sys

import pytest

from _config import parse
from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.fileio import atomic_dir, remove_leftovers, this_host
from mpignn.partition import partition_graph


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _plant(path):
    path.mkdir()
    (path / "x.npy").write_bytes(b"0" * 1000)
    return path


def test_temp_names_carry_pid_and_host(tmp_path):
    with atomic_dir(tmp_path / "parts") as tmp:
        assert tmp.name == f".parts.tmp-{os.getpid()}@{this_host()}"


def test_a_failed_rename_puts_the_previous_folder_back(tmp_path, monkeypatch):
    """The old folder moved aside, then the new one cannot take its name: the old one returns, nothing else stays."""
    final = _plant(tmp_path / "best")
    real = os.replace
    calls = []

    def second_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("rename failed")
        real(src, dst)

    with pytest.raises(OSError, match="rename failed"):
        with atomic_dir(final) as tmp:
            (tmp / "y.npy").write_bytes(b"1")
            monkeypatch.setattr(os, "replace", second_fails)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best"]
    assert sorted(p.name for p in final.iterdir()) == ["x.npy"]


def test_dead_leftovers_go_live_and_foreign_ones_stay(tmp_path, caplog):
    dead, host = _dead_pid(), this_host()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gone = [_plant(tmp_path / f".parts.tmp-{dead}@{host}"), _plant(tmp_path / f".parts.incoming-{dead}@{host}")]
        (tmp_path / f".parts.tmp-{dead}@{host}.npz").write_bytes(b"1")  # atomic_path(suffix=".npz")
        gone.append(tmp_path / f".parts.tmp-{dead}@{host}.npz")
        kept = [_plant(tmp_path / f".parts.tmp-{live.pid}@{host}"),        # a writer still at work
                _plant(tmp_path / f".parts.old-{os.getpid()}@{host}"),     # this process's own
                _plant(tmp_path / f".parts.tmp-{dead}@{host}x"),           # another host (shared filesystem)
                _plant(tmp_path / f".other.tmp-{dead}@{host}"),            # another folder's
                _plant(tmp_path / "parts")]
        with caplog.at_level("WARNING", logger="mpignn.fileio"):
            removed = remove_leftovers(tmp_path / "parts")
        assert sorted(removed) == sorted(gone)
        assert all(not p.exists() for p in gone) and all(p.exists() for p in kept)
        assert caplog.text.count("left by a killed run") == 3 and str(dead) in caplog.text
    finally:
        live.kill()
        live.wait()


def test_partitioning_removes_what_a_killed_partitioner_left(tmp_path):
    dead, host = _dead_pid(), this_host()
    out = tmp_path / "parts"
    leftovers = [_plant(tmp_path / f".parts.parhip-{dead}@{host}"), _plant(tmp_path / f".parts.tmp-{dead}@{host}")]
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = _plant(tmp_path / f".parts.tmp-{writer.pid}@{host}")
        partition_graph(make_synthetic(SyntheticSpec(num_nodes=300, avg_degree=4, num_features=4)), 2, out)
    finally:
        writer.kill()
        writer.wait()
    assert (out / "META.json").is_file()
    assert not any(p.exists() for p in leftovers) and live.exists()
    assert not list(tmp_path.glob(f".parts.parhip-{os.getpid()}@*")), "this run's scratch folder was left"


def test_force_flag_defaults_off():
    assert parse([]).force is False and parse(["--force"]).force is True
