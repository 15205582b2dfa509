"""The best-validation-epoch selection and the accuracy counter (ogb's Evaluator for ogbn-* datasets)."""
import numpy as np
import pytest
import torch

from mpignn.tasks.node import correct_counter
from mpignn.training.record import BEST_FIELDS, BestEpoch, format_final


def _rec(epoch, val, test):
    return {"epoch": epoch, "val_acc": val, "test_acc": test}


def select_best(records):
    """The best epoch as training tracks it (training/fit.py): one `BestEpoch.update` an epoch."""
    best = BestEpoch()
    for rec in records:
        best.update(rec)
    return best


def test_best_epoch_is_the_highest_validation_accuracy_earliest_on_ties():
    records = [_rec(0, 0.50, 0.90), _rec(1, None, None), _rec(2, 0.70, 0.60), _rec(3, 0.70, 0.99),
               _rec(4, 0.65, 0.95)]
    best = select_best(records)
    assert (best.epoch, best.val_acc, best.test_acc) == (2, 0.70, 0.60)
    assert dict(zip(BEST_FIELDS, (2, 0.70, 0.60))) == best.fields()
    assert "final test accuracy 0.6000 at best val epoch 2 (val 0.7000; last epoch test 0.9500)" in \
        format_final(best, records[-1], 2)


def test_best_epoch_survives_a_checkpoint_round_trip():
    best = select_best([_rec(0, 0.4, 0.3), _rec(1, 0.6, 0.5)])
    again = BestEpoch.from_dict(best.to_dict())
    assert again == best and not again.update(_rec(2, 0.6, 0.9)) and again.update(_rec(3, 0.61, 0.1))
    assert again.fields()["best_epoch"] == 3


def test_no_validation_accuracy_reports_the_last_epoch():
    best = select_best([_rec(0, None, 0.4)])
    assert best.fields() == {"best_epoch": None, "best_val_acc": None, "test_acc_at_best_val": None}
    assert "final test accuracy 0.4000 (no validation accuracy" in format_final(best, _rec(0, None, 0.4), 1)


def test_ogb_datasets_count_through_ogbs_evaluator(monkeypatch):
    from ogb.nodeproppred import Evaluator

    calls = []
    original = Evaluator.eval
    monkeypatch.setattr(Evaluator, "eval", lambda self, d: calls.append(self.name) or original(self, d))
    rng = np.random.default_rng(0)
    labels = torch.from_numpy(rng.integers(0, 40, 1001))
    pred = torch.where(torch.from_numpy(rng.random(1001) < 0.37), labels, (labels + 1) % 40)
    count = correct_counter("ogbn-arxiv")
    assert count(pred, labels) == float((pred == labels).sum()) and calls == ["ogbn-arxiv"]
    assert count(pred[:0], labels[:0]) == 0.0
    assert correct_counter("Cora")(pred, labels) == float((pred == labels).sum()) and len(calls) == 1


def test_unknown_ogb_name_fails_in_ogb():
    with pytest.raises(ValueError):
        correct_counter("ogbn-nonexistent")


def test_evaluate_counts_with_the_metric():
    from mpignn.data import make_synthetic
    from mpignn.data.synthetic import SyntheticSpec
    from mpignn.exchange import FeatureStore
    from mpignn.loader.batches import BatchLoader
    from mpignn.training.epoch import train_epoch
    from mpignn.models import build_model
    from mpignn.sampling import LocalHops, NeighborSampler
    from mpignn.tasks.node import NodeTask, evaluate_nodes

    g = make_synthetic(SyntheticSpec(num_nodes=400, avg_degree=5, num_features=6))
    loader = BatchLoader(NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [3, 3]), FeatureStore(g.x, g.y, 0),
                        g.test_idx, 32, shuffle=False, wrap=False)
    torch.manual_seed(0)
    model = build_model("sage", 6, 8, g.num_classes, 2)
    train = BatchLoader(loader.sampler, loader.features, g.train_idx, 32)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(3):
        train.set_epoch(epoch)
        train_epoch(model, train, optimizer, task=NodeTask(), device="cpu")
    plain = evaluate_nodes(model, loader, device="cpu")
    loader.set_epoch(0)  # the same draws again: each pass is a new epoch otherwise
    ogb = evaluate_nodes(model, loader, device="cpu", metric=correct_counter("ogbn-products"))
    assert plain == ogb and plain["seeds"] == len(g.test_idx) and 0 < plain["correct"] < plain["seeds"]
