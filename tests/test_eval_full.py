"""`--eval full`: training reports exact-inference scores (every layer over whole neighbourhoods) beside the
sampled ones, equal to what `python -m mpignn.predict` computes from the same weights."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from _mpirun import run_mpi_raw
from mpignn.data import load_dataset
from mpignn.errors import ConfigError

GRAPH = "synthetic:num_nodes=800,avg_degree=6,num_features=12,num_classes=4"


def _accuracy_from_predictions(tmp_path, checkpoint_dir, root) -> tuple[float, float]:
    """(val, test) accuracy of `python -m mpignn.predict`'s predictions of the checkpoint, on 1 rank."""
    from mpignn.predict import load
    from mpignn.predict.cli import main as predict

    out = tmp_path / "pred"
    assert predict(["--checkpoint-dir", str(checkpoint_dir), "--out", str(out), "--threads", "1", "--force"]) == 0
    pred, g = load(out)["pred"], load_dataset(GRAPH, str(root))
    return tuple(float((pred[idx] == g.y[idx]).mean()) for idx in (g.val_idx, g.test_idx))


def _train_args(tmp_path, root):
    return ["--dataset", GRAPH, "--root", str(root), "--epochs", "2", "--fanout", "3,2", "--batch-size", "64",
            "--threads", "1", "--eval", "full", "--checkpoint-dir", str(tmp_path / "ck"),
            "--metrics-out", str(tmp_path / "m.jsonl")]


def _last(tmp_path):
    return [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()][-1]


def test_one_rank_full_scores_equal_the_predictions_of_the_same_weights(tmp_path, capsys):
    from mpignn import train

    root = tmp_path / "data"
    assert train.main(_train_args(tmp_path, root)) == 0
    last = _last(tmp_path)
    assert (last["val_acc_full"], last["test_acc_full"]) == pytest.approx(
        _accuracy_from_predictions(tmp_path, tmp_path / "ck", root), abs=1e-12)
    assert last["val_acc"] is not None  # the sampled scores stay beside them
    final = [line for line in capsys.readouterr().out.splitlines() if line.startswith("final test")][-1]
    assert "sampled neighbourhoods; exact inference" in final and f"test {last['test_acc_full']:.4f}" in final


@pytest.mark.mpi
def test_two_ranks_full_scores_equal_one_rank_predictions_of_their_weights(tmp_path):
    root = tmp_path / "data"
    rc, out = run_mpi_raw(2, [sys.executable, "-m", "mpignn.train", *_train_args(tmp_path, root)], timeout=180)
    assert rc == 0, out[-3000:]
    last = _last(tmp_path)
    assert last["world_size"] == 2
    assert (last["val_acc_full"], last["test_acc_full"]) == pytest.approx(
        _accuracy_from_predictions(tmp_path, tmp_path / "ck", root), abs=1e-12)


def test_a_task_without_exact_evaluation_is_refused_before_loading(tmp_path):
    from mpignn import train

    with pytest.raises(ConfigError, match="^--eval full expects a task with exact evaluation; --task link"):
        train.main(["--task", "link", "--eval", "full", "--dataset", GRAPH, "--root", str(tmp_path / "none")])
    assert not (tmp_path / "none").exists()
