"""`--eval exact`: training scores val and test by exact inference (every layer over whole neighbourhoods), equal
to what `python -m mpignn.predict` computes from the same weights, in the place of the sampled scores (no
evaluation batch drawn); `--eval full`, its old second name, is refused with the hint."""
from __future__ import annotations

import json

import numpy as np
import pytest

from _mpirun import run_cli_many
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
            "--threads", "1", "--eval", "exact", "--checkpoint-dir", str(tmp_path / "ck"),
            "--metrics-out", str(tmp_path / "m.jsonl")]


def _records(tmp_path):
    return [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]


def _last(tmp_path):
    return _records(tmp_path)[-1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """The node and the link run on 2 ranks, in one job; returns a function of the name giving (its folder,
    the data root, its last record)."""
    base = tmp_path_factory.mktemp("eval_exact")
    root = base / "data"
    args = {"node": _train_args(base / "node", root), "link": _link_args(base / "link", root)}
    runs = run_cli_many(2, {name: ["mpignn.train", *a] for name, a in args.items()}, base / "out", timeout=300)

    def run(name):
        codes, out = runs[name]
        assert codes == [0, 0], out[-3000:]
        last = _last(base / name)
        assert last["world_size"] == 2
        return base / name, root, last

    return run


@pytest.mark.mpi
def test_two_ranks_exact_scores_equal_one_rank_predictions_of_their_weights(two_ranks):
    folder, root, last = two_ranks("node")
    assert (last["val_acc"], last["test_acc"]) == pytest.approx(
        _accuracy_from_predictions(folder, folder / "ck", root), abs=1e-12)


@pytest.mark.parametrize("task", ["node", "link"])
def test_eval_exact_scores_by_exact_inference_alone(tmp_path, capsys, monkeypatch, task):
    """The last evaluation's scores are those of `python -m mpignn.predict`'s outputs of the same weights; every
    evaluation's choose the best epoch, their time is eval_s's, and no sampled evaluation runs (it would fail)."""
    import time

    from mpignn import train
    from mpignn.tasks import link, node

    root = tmp_path / "data"
    make = _link_args if task == "link" else _train_args
    monkeypatch.setattr(node, "evaluate_nodes", lambda *a, **k: pytest.fail("a sampled evaluation ran"))
    monkeypatch.setattr(link, "evaluate_links", lambda *a, **k: pytest.fail("a sampled evaluation ran"))
    cls = link.LinkTask if task == "link" else node.NodeTask
    exact_pass = cls.evaluate_exact
    monkeypatch.setattr(cls, "evaluate_exact", lambda *a, **k: time.sleep(0.2) or exact_pass(*a, **k))
    more = ["--epochs", "3", "--eval-every", "1"]  # links evaluate after the last epoch by default
    assert train.main([*make(tmp_path, root), *more]) == 0
    exact = _records(tmp_path)
    assert len(exact) == 3
    metric = "auc" if task == "link" else "acc"
    if task == "link":
        want = _link_scores_from_predictions(tmp_path, tmp_path / "ck", root)
        assert {k: exact[-1][k] for k in want} == pytest.approx(want, abs=1e-6)
    else:
        assert (exact[-1]["val_acc"], exact[-1]["test_acc"]) == pytest.approx(
            _accuracy_from_predictions(tmp_path, tmp_path / "ck", root), abs=1e-12)
    for i, e in enumerate(exact):
        assert not any(k.endswith("_full") for k in e) and e["eval_s"] >= 0.2
        best = max(range(i + 1), key=lambda j: (exact[j][f"val_{metric}"], -j))  # the first of the highest
        assert (e["best_epoch"], e[f"best_val_{metric}"], e[f"test_{metric}_at_best_val"]) == \
            (best, exact[best][f"val_{metric}"], exact[best][f"test_{metric}"])
    final = [line for line in capsys.readouterr().out.splitlines() if line.startswith("final test")][-1]
    best = exact[-1]["best_epoch"]
    assert f" {exact[best][f'test_{metric}']:.4f} at best val epoch {best} " in final
    assert final.endswith("exact inference (whole neighbourhoods)")


def test_eval_exact_scores_stop_the_run(tmp_path, capsys):
    """--target-val reads the exact validation score: reached at the first evaluation, the run stops there."""
    from mpignn import train

    args = _train_args(tmp_path, tmp_path / "data")
    assert train.main([*args, "--epochs", "5", "--target-val", "0.01"]) == 0
    records = _records(tmp_path)
    assert len(records) == 1 and records[0]["val_acc"] >= 0.01
    assert "reached --target-val 0.0100 after 1.00 epochs: stopping" in capsys.readouterr().err


def _link_scores_from_predictions(tmp_path, checkpoint_dir, root) -> dict[str, float]:
    """AUC of the held-out pairs (and test MRR) scored by the dot decoder over `mpignn.predict`'s embeddings of
    the checkpoint, on 1 rank: the pairs read from the partition's links/ folder, in original ids."""
    import torch

    from mpi_workers.rank_sum_auc import auc
    from mpignn.tasks.link_metrics import positive_ranks
    from mpignn.predict import load
    from mpignn.predict.cli import main as predict

    out = tmp_path / "pred"
    assert predict(["--checkpoint-dir", str(checkpoint_dir), "--out", str(out), "--threads", "1", "--force"]) == 0
    emb = torch.from_numpy(np.array(load(out)["emb"]))
    links = next(root.glob("**/links/SPLIT.json")).parent
    node_map = np.load(links.parent / "node_map.npy")
    orig = np.empty_like(node_map)
    orig[node_map] = np.arange(len(node_map))  # partition id -> original id
    score = lambda a, b: (emb[orig[a]] * emb[orig[b]]).sum(-1).numpy()  # noqa: E731  (--decoder dot)
    got = {}
    for split in ("val", "test"):
        pos, neg = (np.load(links / f"{split}_{k}.npy") for k in ("pos", "neg"))
        got[f"{split}_auc"] = auc(np.concatenate([score(*pos), score(*neg)]),
                                       np.r_[np.ones(pos.shape[1]), np.zeros(neg.shape[1])])
    pos, tails = np.load(links / "test_pos.npy"), np.load(links / "test_neg_tails.npy")
    tail_scores = score(np.repeat(pos[0], tails.shape[1]), tails.reshape(-1)).reshape(tails.shape)
    got["test_mrr"] = float((1.0 / positive_ranks(score(*pos), tail_scores)).mean())
    return got


def _link_args(tmp_path, root):
    return [*_train_args(tmp_path, root), "--task", "link", "--epochs", "1", "--link-tails", "20"]


@pytest.mark.mpi
def test_two_ranks_link_exact_scores_equal_one_rank_predictions_of_their_weights(two_ranks):
    folder, root, last = two_ranks("link")
    want = _link_scores_from_predictions(folder, folder / "ck", root)
    assert {k: last[k] for k in want} == pytest.approx(want, abs=1e-6)


def test_a_task_without_exact_evaluation_is_refused():
    from mpignn.tasks.base import Task

    class Bare(Task):
        name = "bare"

    with pytest.raises(ConfigError, match="^--eval exact expects a task with exact evaluation; --task bare"):
        Bare().evaluate_exact(None, None, None)


def test_the_old_second_name_is_refused_with_its_replacement():
    from _config import parse

    with pytest.raises(ConfigError, match=r"^--eval full is gone: .* HINT: --eval exact$"):
        parse(["--eval", "full"])
