"""Cooperative mini-batches (`--minibatch cooperative`): one step equals one process on the global batch
(rows, loss, gradients), training reports each row computed once, and what it cannot train is refused."""
from types import SimpleNamespace

import numpy as np
import pytest

from _mpirun import records, run_mpi, run_python, train_runs
from mpignn.config.train_config import TrainConfig
from mpignn.errors import ConfigError
from mpignn.training.fit import check_flags
from mpignn.tasks import make_task

SMALL = ["--dataset", "synthetic:num_nodes=6000,avg_degree=8,num_features=16", "--epochs", "3", "--hidden", "32",
         "--batch-size", "256", "--fanout", "5,5", "--lr", "0.01"]


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 3])  # 3: uneven parts; 4 ranks on this 2-core VM took 52 s and added no path
def test_one_cooperative_step_equals_one_process_on_the_global_batch(tmp_path, n):
    run_mpi("coop_step.py", n, tmp_path / "parts", timeout=120)


RUNS = {"coop": ["--minibatch", "cooperative", "--feature-dtype", "bf16", "--prefetch", "on"],
        "alone": ["--minibatch", "independent"], "tune": ["--minibatch", "tune", "--epochs", "1"],
        # each mode tune can pick, trained on its own (cheaper than a second job after auto's pick)
        "same-independent": ["--minibatch", "independent", "--epochs", "1"],
        "same-cooperative": ["--minibatch", "cooperative", "--epochs", "1"],
        "same-full": ["--minibatch", "full", "--epochs", "1"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: (records, output)} of the 2-rank runs of RUNS, in one job."""
    base = tmp_path_factory.mktemp("coop")
    results = train_runs(2, base, ["--root", base, *SMALL], RUNS)
    return {name: records(base, results, name) for name in RUNS}


@pytest.mark.mpi
def test_cooperative_training_computes_each_row_once_and_learns_as_independent(runs):
    (coop, out), (alone, _) = runs["coop"], runs["alone"]
    last = coop[-1]
    assert last["redundancy"] == 1.0 and last["halo_step_bytes"] > 0
    assert "redundancy 1.00 halo" in out
    assert alone[-1]["redundancy"] > 1.05  # independent shares overlap: their rows repeat across ranks
    assert last["rows_per_step"][0] < alone[-1]["rows_per_step"][0]
    assert all(own <= all_ for own, all_ in zip(last["own_rows_per_step"], last["rows_per_step"]))
    assert last["test_acc_at_best_val"] > 0.2  # 8 classes: chance is 0.125
    assert abs(last["test_acc_at_best_val"] - alone[-1]["test_acc_at_best_val"]) < 0.05


@pytest.mark.mpi
def test_tune_measures_both_modes_and_then_trains_as_the_one_it_picked(runs):
    auto, out = runs["tune"]
    picked = auto[-1]["minibatch"]
    same = runs[f"same-{picked}"][0]
    assert f"--minibatch tune: {picked} | independent " in out and "cooperative " in out
    assert f"pin it with --minibatch {picked}" in out
    # the measured steps dropped their gradients and left the random streams as they were
    assert [(r["loss"], r["train_acc"], r["val_acc"]) for r in auto] == \
        [(r["loss"], r["train_acc"], r["val_acc"]) for r in same]


class _Rank:
    world_size, rank, device = 2, 0, "cpu"


@pytest.mark.parametrize("coop_s,picked", [(0.85, "cooperative"), (0.93, "independent"), (1.2, "independent")])
def test_tune_takes_cooperative_only_when_it_is_10_percent_faster(monkeypatch, coop_s, picked):
    import torch

    from mpignn.training import minibatch

    closed = []

    class Loader:
        def __init__(self, mode):
            self.mode = mode
            self.sampler = SimpleNamespace(close=lambda: closed.append(mode), cooperative=mode == "cooperative")

        def __len__(self):
            return 1 + minibatch.PROBE_STEPS

    times = {"independent": 1.0, "cooperative": coop_s}
    monkeypatch.setattr(minibatch, "_measure", lambda rt, model, loader, task, bf16: minibatch.Probe(
        times[loader.mode], None, 0.0))
    mode, probes = minibatch.tune_minibatch(_Rank(), torch.nn.Linear(2, 2), Loader, task=None)
    assert mode == picked and probes["cooperative"].step_s == coop_s
    assert closed == ["cooperative"]  # the probe's communicators are freed: training builds its own loader


def test_closing_a_cooperative_sampler_frees_its_communicators():
    from mpi4py import MPI

    from mpignn.exchange.alltoall import MpiAlltoall
    from mpignn.sampling import LocalHops
    from mpignn.sampling.cooperative import CooperativeSampler

    rowptr, col = np.array([0, 1, 2]), np.array([1, 0])
    sampler = CooperativeSampler(MPI.COMM_SELF.Dup(), LocalHops(rowptr, col), np.array([0, 2]), [1],
                                 MpiAlltoall(MPI.COMM_SELF.Dup()))
    sampler.close()
    assert sampler.comm == MPI.COMM_NULL and sampler.rows.comm == MPI.COMM_NULL


@pytest.mark.parametrize("world,refusal,epoch_steps", [(1, "", 10), (2, "--replicated", 10), (2, "", 2)])
def test_tune_is_independent_without_measuring_where_cooperative_cannot_run(monkeypatch, world, refusal,
                                                                            epoch_steps):
    import torch

    from mpignn.training import minibatch

    monkeypatch.setattr(minibatch, "_measure", lambda *a: pytest.fail("measured"))
    monkeypatch.setattr(minibatch, "_close", lambda loader: None)  # the loaders here are lists
    rt = _Rank()
    rt.world_size = world
    mode, probes = minibatch.tune_minibatch(rt, torch.nn.Linear(2, 2), lambda mode: [None] * epoch_steps,
                                              task=None, refusal=refusal)
    assert (mode, probes) == ("independent", {})


@pytest.mark.parametrize("flags,named", [(["--replicated"], "--replicated"), (["--embed-dim", "8"], "--embed-dim")])
def test_flags_cooperative_cannot_train_are_refused(flags, named):
    with pytest.raises(ConfigError, match=f"--minibatch cooperative .*{named}.*HINT: --minibatch independent"):
        TrainConfig.from_args(_namespace(["--minibatch", "cooperative", *flags]))


def test_link_prediction_is_refused_up_front():
    cfg = TrainConfig.from_args(_namespace(["--minibatch", "cooperative", "--task", "link"]))
    with pytest.raises(ConfigError, match="--minibatch cooperative trains node classification; --task link"):
        check_flags(cfg, make_task(cfg))


@pytest.mark.mpi
def test_a_heterogeneous_graph_is_refused_on_every_rank(tmp_path):
    from mpignn.data import save_npz
    from mpignn.data.synthetic_hetero import make_user_item

    path = tmp_path / "hetero.npz"
    save_npz(str(path), make_user_item(num_items=400, num_users=100, edges_per_item=4))
    rc, out = run_python(2, ["-m", "mpignn.train", "--root", str(tmp_path), "--dataset",
                             f"npz:{path}", "--minibatch", "cooperative", "--epochs", "1"], timeout=120)
    assert rc != 0
    assert out.count("--minibatch cooperative samples homogeneous graphs") >= 2, out[-3000:]


def _namespace(argv):
    from mpignn.config.train_config import build_parser

    return build_parser().parse_args(argv)
