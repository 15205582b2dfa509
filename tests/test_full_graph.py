"""`--minibatch full` (issue 38 items 2 and 4): one epoch on 1, 2 and 3 ranks equals PyG's full-batch model on the
whole graph (w:full_epoch); the CLI trains with one step per epoch and scores whole neighbourhoods, with a bf16
feature table too; what it cannot train, or a step that cannot fit, is refused in one line before anything runs."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from _config import parse
from _mpirun import run_mpi, run_python
from mpignn.config.refusals import refusal
from mpignn.errors import ConfigError
from mpignn.tasks import make_task
from mpignn.training.fit import check_flags

SMALL = ["--dataset", "synthetic:num_nodes=3000,avg_degree=8,num_features=16", "--hidden", "32", "--fanout", "5,5",
         "--lr", "0.01", "--dropout", "0.2"]


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_full_epoch_equals_pyg_full_batch_forward_loss_and_gradients(tmp_path, n):
    run_mpi("full_epoch.py", n, tmp_path, timeout=180)


@pytest.mark.mpi
def test_the_cli_trains_one_step_per_epoch_on_whole_neighbourhoods(tmp_path):
    metrics = tmp_path / "full.jsonl"
    rc, out = run_python(2, ["-m", "mpignn.train", "--root", str(tmp_path), *SMALL, "--epochs", "8",
                             "--minibatch", "full", "--feature-dtype", "bf16", "--metrics-out", str(metrics)],
                         timeout=240)
    assert rc == 0, out[-4000:]
    recs = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert {r["minibatch"] for r in recs} == {"full"}
    assert recs[-1]["redundancy"] == 1.0 and recs[-1]["halo_step_bytes"] > 0
    # the kept batch's input rows crossed once: later epochs move only the hidden layers' rows
    assert recs[-1]["halo_step_bytes"] < recs[0]["halo_step_bytes"]
    assert recs[-1]["loss"] < recs[0]["loss"] and recs[-1]["test_acc_at_best_val"] > 0.3  # 8 classes
    assert "1 train steps per epoch" in out and "whole neighbourhoods" in out


@pytest.mark.mpi
def test_a_rank_that_receives_no_input_rows_keeps_step_with_the_others(tmp_path):
    """Two dense halves whose few cut edges all point into the first: rank 1 receives no rows, rank 0 does; from
    the second epoch both must skip the kept input's exchange alike (rank 1 used to exchange every step)."""
    rng = np.random.default_rng(0)
    half = 200
    inner = [rng.integers(lo, lo + half, (2, 8 * half)) for lo in (0, half) for _ in range(2)]
    cut = np.stack([rng.integers(half, 2 * half, 20), rng.integers(0, half, 20)])  # source -> target: into part 0
    np.savez(tmp_path / "g.npz", edge_index=np.concatenate([*inner, cut], axis=1),
             x=rng.standard_normal((2 * half, 16)).astype(np.float32), y=rng.integers(0, 4, 2 * half),
             train_idx=np.arange(0, 2 * half, 2), val_idx=np.arange(1, 2 * half, 4), test_idx=np.arange(3, 2 * half, 4))
    rc, out = run_python(2, ["-m", "mpignn.train", "--root", str(tmp_path), "--dataset", f"npz:{tmp_path / 'g.npz'}",
                             "--minibatch", "full", "--epochs", "3", "--hidden", "16", "--fanout", "5,5",
                             "--collective-timeout", "60", "--metrics-out", str(tmp_path / "m.jsonl")], timeout=240)
    assert rc == 0, out[-4000:]
    assert [json.loads(line)["epoch"] for line in (tmp_path / "m.jsonl").read_text().splitlines()] == [0, 1, 2]


def test_link_prediction_and_replicated_graphs_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="--minibatch full trains node classification; --task link"):
        check_flags(parse(["--minibatch", "full", "--task", "link"]), make_task(name="link"))
    assert refusal({"minibatch": "full", "replicated": True, "embed_dim": 0}).startswith(
        "--minibatch full computes each row on its owner; --replicated cannot. HINT")


def test_a_heterogeneous_graph_is_refused_by_the_loader(rt, tmp_path):
    from mpignn.data import save_npz
    from mpignn.data.synthetic_hetero import make_user_item
    from mpignn.runtime import load_local_graph
    from mpignn.training.loaders import cooperative_refusal, make_loader

    save_npz(str(tmp_path / "hetero.npz"), make_user_item(num_items=300, num_users=80, edges_per_item=4))
    graph = load_local_graph(rt, f"npz:{tmp_path / 'hetero.npz'}", str(tmp_path), fanout=[3, 3], cache_size=0)
    assert "--minibatch full samples homogeneous graphs" in cooperative_refusal(graph, "full")
    with pytest.raises(ConfigError, match="--minibatch full samples homogeneous graphs"):
        make_loader(rt, graph, "train", minibatch="full")


def test_a_step_that_cannot_fit_is_refused_before_it_runs(rt, tmp_path, monkeypatch):
    from mpignn.models import build_model
    from mpignn.runtime import load_local_graph
    from mpignn.training import loaders

    graph = load_local_graph(rt, "synthetic:num_nodes=500,num_features=8", str(tmp_path), fanout=[3, 3],
                             cache_size=0)
    model = build_model("gat", graph.num_features, 16, graph.num_classes, 2)
    need = model.activation_bytes(500, len(graph.part.col), 4)
    monkeypatch.setattr(loaders, "spare_memory", lambda rt, features: (need - 1, 1))
    assert re.search(r"--minibatch full: 500 rows .*HINT: more ranks", loaders.full_fit_problem(rt, graph, model))
    monkeypatch.setattr(loaders, "spare_memory", lambda rt, features: (need, 1))
    assert loaders.full_fit_problem(rt, graph, model) == ""


@pytest.mark.parametrize("coverage,full_worth,picked", [(0.6, 0.95, "full"), (0.6, 1.05, "independent"),
                                                        (0.4, 0.1, "independent")])
def test_auto_trains_full_where_a_step_covers_the_graph_and_counts_at_most_full_worth_steps(monkeypatch, coverage,
                                                                                          full_worth, picked):
    """`--minibatch auto` decides from counts alone: the clock is never read (a timing probe would fail here)."""
    import time

    from mpignn.training import minibatch
    from mpignn.training.minibatch import StepCount

    step = StepCount(inputs=coverage * 100, targets=(60.0, 10.0), edges=(300.0, 50.0))
    scale = full_worth * minibatch.FULL_WORTH  # the full step's multiply-adds over the independent step's
    full = StepCount(inputs=100, targets=tuple(t * scale for t in step.targets),
                     edges=tuple(e * scale for e in step.edges))
    monkeypatch.setattr(minibatch, "count_step", lambda rt, loader: full if loader == "full" else step)
    monkeypatch.setattr(minibatch, "_close", lambda loader: None)  # the loaders here are their modes' names
    monkeypatch.setattr(time, "perf_counter", lambda: pytest.fail("--minibatch auto read the clock"))
    rt = type("Rank", (), {"world_size": 1, "rank": 0, "device": "cpu"})()
    mode, why = minibatch.choose_minibatch(rt, lambda mode: mode, in_width=8, hidden=16, num_nodes=100,
                                           full_refusal="")
    assert mode == picked and ("multiply-adds" in why) == (coverage >= minibatch.FULL_COVERAGE)
    assert (minibatch.FULL_WORTH, minibatch.FULL_COVERAGE) == (3.0, 0.5)  # the README's "three" and "half"
    refused, why = minibatch.choose_minibatch(rt, lambda mode: pytest.fail("counted"), in_width=8, hidden=16,
                                              num_nodes=100, full_refusal="--minibatch full trains node "
                                              "classification. HINT: ...")
    assert (refused, why) == ("independent", "--minibatch full trains node classification")


def test_a_step_count_costs_the_multiply_adds_of_its_layers():
    from mpignn.training.minibatch import StepCount

    step = StepCount(inputs=50, targets=(20.0, 4.0), edges=(100.0, 30.0))
    # layer 1: 100 edges x 8 columns + 2 maps x 20 rows x 8 x 16; layer 2: 30 x 16 + 2 x 4 x 16 x 16
    assert step.cost(8, 16) == 100 * 8 + 2 * 20 * 8 * 16 + 30 * 16 + 2 * 4 * 16 * 16
