"""Reproducible by default (docs/reproducibility.md): one command, seed, rank count and thread count give one
run, on a quiet machine and under a CPU hog on every core, with the loader's thread on or off and with a clock
that lies; every `auto` resolves to a value that the config line prints and records and checkpoints store, and
re-running with those values repeats the run. The multi-host case (1 host x 2 ranks against 2 hosts x 1 rank)
is in tests/test_multihost.py."""
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _mpirun import SHARED, records, train_runs
from mpignn.training.record import repeatable as same_run

PHOTO = SHARED / "datasets" / "Photo"
needs_photo = pytest.mark.skipif(not PHOTO.is_dir(), reason="../shared/datasets/Photo is absent")
TINY = "synthetic:num_nodes=600,avg_degree=4,num_features=8"


def photo_root(base: Path) -> Path:
    """A root holding a copy of the shipped Photo folder (mpignn writes its cache beside the raw files)."""
    root = base / "root"
    if not (root / "Photo").is_dir():
        shutil.copytree(PHOTO, root / "Photo")
    return root


def graphs(base: Path) -> dict[str, list[object]]:
    """The default graph (auto trains independent there) and Amazon Photo (auto trains full-graph)."""
    out = {"default": ["--root", base / "root", "--epochs", "2", "--max-steps", "4"]}
    if PHOTO.is_dir():
        out["photo"] = ["--root", photo_root(base), "--dataset", "Amazon-Photo", "--splits",
                        PHOTO / "splits" / "amazon-photo_split.npz", "--epochs", "3", "--hidden", "64"]
    return out


@contextlib.contextmanager
def cpu_hog():
    """A busy loop on every core for the block's duration, at the lowest priority: it runs whenever the run's
    processes wait or yield, and leaves the cores of the suite's other test process alone."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(19))
            for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("graph", ["default", pytest.param("photo", marks=needs_photo)])
def test_one_command_one_run_quiet_loaded_and_with_the_loader_thread(tmp_path, graph):
    common = graphs(tmp_path)[graph]
    quiet = train_runs(2, tmp_path, common, {"quiet": [], "thread": ["--prefetch", "on"]})
    with cpu_hog():
        loaded = train_runs(2, tmp_path, common, {"loaded": []})
    runs = {name: records(tmp_path, results, name)[0] for results in (quiet, loaded) for name in results}
    assert runs["quiet"][0]["minibatch"] == {"default": "independent", "photo": "full"}[graph]
    assert runs["quiet"][0]["resolved"]["prefetch"] == "off"  # so "thread" trains with another timing
    want = [same_run(r) for r in runs["quiet"]]
    assert [same_run(r) for r in runs["loaded"]] == want
    assert [{**same_run(r), "resolved": None} for r in runs["thread"]] == [{**r, "resolved": None} for r in want]
    out = quiet["quiet"][1]
    config = json.loads(out.split("mpignn.train: config ", 1)[1].splitlines()[0])
    assert "auto" not in config.values() and config["minibatch"] == want[0]["minibatch"]  # what ran, not auto


def _lying_clock(monkeypatch):
    """time.perf_counter that adds 0-5 s at random to every reading: a machine whose load comes and goes."""
    real, noise = time.perf_counter, random.Random(1)
    monkeypatch.setattr(time, "perf_counter", lambda: real() + noise.uniform(0.0, 5.0))


@needs_photo
def test_a_lying_clock_changes_no_record(tmp_path, monkeypatch):
    """In-process, one rank, Amazon Photo (where full-graph training is a candidate): the records of a run whose
    clock lies equal an honest run's but for times (a timing probe would pick its mode by the noise)."""
    from mpignn import train

    argv = [str(a) for a in graphs(tmp_path)["photo"]] + ["--threads", "1", "--epochs", "2"]
    assert train.main([*argv, "--metrics-out", str(tmp_path / "honest.jsonl")]) == 0
    _lying_clock(monkeypatch)
    assert train.main([*argv, "--metrics-out", str(tmp_path / "lying.jsonl")]) == 0
    honest, lying = ([same_run(json.loads(line)) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
                     for name in ("honest", "lying"))
    assert lying == honest and honest[0]["minibatch"] == "full"


def test_the_printed_values_repeat_the_run_and_checkpoints_store_them(tmp_path, capfd):
    """Every `auto` resolves once: the config line shows values, not auto; records and the checkpoint store
    them; a second run given them as flags (the line the run prints) trains the same records."""
    from mpignn import train
    from mpignn.runtime.session import CHOOSE
    from mpignn.training.checkpoint import checkpoint_config, latest_checkpoint

    common = ["--dataset", TINY, "--root", str(tmp_path), "--epochs", "2", "--fanout", "3,3", "--hidden", "8",
              "--threads", "1"]
    assert train.main([*common, "--metrics-out", str(tmp_path / "a.jsonl"), "--checkpoint-dir",
                       str(tmp_path / "ck")]) == 0
    err = capfd.readouterr().err
    config = json.loads(err.split("mpignn.train: config ", 1)[1].splitlines()[0])
    pinned = err.split("resolved (pin them to repeat this run anywhere): ", 1)[1].splitlines()[0]
    first = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    resolved = first[0]["resolved"]
    assert set(resolved) == set(CHOOSE) - {"partition_method", "threads"}  # metis is the default, threads given
    assert all(config[k] == v != "auto" for k, v in resolved.items())
    assert checkpoint_config(tmp_path / "ck") == config
    import torch

    state = torch.load(latest_checkpoint(tmp_path / "ck") / "checkpoint.pt", weights_only=True)
    assert state["extra"]["resolved"] == resolved
    assert train.main([*common, "--metrics-out", str(tmp_path / "b.jsonl"), *pinned.split()]) == 0
    again = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert [same_run(r) for r in again] == [{**same_run(r), "resolved": {}} for r in first]


@pytest.mark.parametrize("mode", ["independent", "full"])
def test_the_model_does_not_depend_on_the_mode_that_trains_it(tmp_path, mode):
    """The architecture and dropout are the flags' (and their documented defaults), whatever the mode."""
    import torch

    from mpignn import train
    from mpignn.training.checkpoint import checkpoint_config

    for name, flags in (("plain", []), ("classic", ["--norm", "layer", "--residual", "--linear-head"])):
        ck = tmp_path / name
        assert train.main(["--dataset", TINY, "--root", str(tmp_path), "--epochs", "1", "--threads", "1",
                           "--fanout", "3,3", "--hidden", "8", "--minibatch", mode, "--checkpoint-dir", str(ck),
                           *flags]) == 0
        saved = checkpoint_config(ck)
        assert (saved["norm"], saved["residual"], saved["linear_head"], saved["dropout"]) == \
            (("layer", True, True) if flags else ("none", False, False)) + (0.7,)
        state = torch.load(ck / "best" / "checkpoint.pt", weights_only=True)["model"]
        assert ("head.weight" in state) == bool(flags) and ("norms.0.weight" in state) == bool(flags)


def test_the_removed_classic_flag_is_refused_with_its_replacement():
    from _config import parse
    from mpignn.errors import ConfigError

    with pytest.raises(ConfigError, match="--classic is gone.*HINT: --norm layer --residual --linear-head"):
        parse(["--classic", "auto"])


def test_ranks_that_resolve_a_flag_differently_are_named(caplog):
    """Hosts with other core counts resolve --threads differently: rank 0 says which ranks and values (the
    config line shows its own)."""
    from types import SimpleNamespace

    import numpy as np

    from _config import parse
    from mpignn.runtime.session import resolve_config

    comm = SimpleNamespace(allgather=lambda mine: [mine, {**mine, "threads": 2}],  # rank 1's host: 2 cores
                           allreduce=lambda mine, op: mine)  # prefetch's agreement: rank 1 says the same
    rt = SimpleNamespace(comm=comm, rank=0, world_size=2, threads=1, device="cpu",
                         choice=SimpleNamespace(device_type="cpu", backend="gloo", shared_by=1))
    graph = SimpleNamespace(features=SimpleNamespace(x=np.zeros((2, 2)), on_host=True), replicated=False,
                            cache_rows=7, task=SimpleNamespace(eval_factor=4))
    with caplog.at_level("WARNING"):
        cfg, resolved = resolve_config(rt, parse([]), graph, "independent")
    assert (cfg.threads, resolved["threads"], cfg.cache_size, cfg.eval_batch_size) == (1, 1, 7, 4096)
    assert "ranks resolved threads differently: rank 0: threads=1; rank 1: threads=2" in caplog.text
