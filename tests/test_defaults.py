"""Defaults chosen by measurement (docs/training.md "Defaults and why"): --task link's own defaults apply only
where no flag or --config key sets them; --patience stops a run that plateaus and reports (and keeps, with
--checkpoint-dir) the best validation epoch; without --epochs a run trains until validation stops improving,
within a step budget, evaluating as often as its epochs' length asks (`training.schedule`), and says why it
stopped."""
import json

import pytest
import torch

from _config import parse
from _mpirun import records, train_runs
from mpignn.training.checkpoint import MANIFEST, generations
from mpignn.config.train_config import LINK_DEFAULTS, TrainConfig

TINY = "synthetic:num_nodes=600,avg_degree=4,num_features=8"


def test_link_defaults_apply_only_where_no_flag_was_given(tmp_path):
    bare = parse(["--task", "link", "--dataset", "Cora"])
    for name, value in LINK_DEFAULTS.items():
        assert getattr(bare, name) == value, name
    assert bare.feature_norm == "row" and bare.fanouts == [10, 10]  # not the node task's defaults
    given = parse(["--task", "link", "--epochs", "3", "--feature-norm", "none", "--fanout", "4,4,4"])
    assert (given.epochs, given.feature_norm, given.fanouts) == (3, "none", [4, 4, 4])
    assert given.hidden == LINK_DEFAULTS["hidden"] and given.lr == LINK_DEFAULTS["lr"]  # the rest still apply
    node = parse([])  # the node task keeps the dataclass's defaults
    for name in ("feature_norm", "epochs", "fanout", "hidden", "lr", "eval_every", "dropout", "weight_decay"):
        assert getattr(node, name) == getattr(TrainConfig, name), name
    toml = tmp_path / "run.toml"
    toml.write_text('task = "link"\nhidden = 48\n')
    from_file = parse(["--config", str(toml), "--lr", "0.02"])
    assert (from_file.hidden, from_file.lr, from_file.epochs) == (48, 0.02, LINK_DEFAULTS["epochs"])
    assert parse(["--config", str(toml), "--task", "node"]).epochs == TrainConfig.epochs


def test_the_bare_command_trains_the_readmes_default_graph():
    """README: the quick start generates the default graph (100k nodes, 8 classes) and partitions it with METIS
    under `data/`."""
    from mpignn.data.synthetic import SyntheticSpec

    bare = parse([])
    assert (bare.dataset, bare.root, bare.partition_method) == ("synthetic", "data", "metis")
    assert (SyntheticSpec().num_nodes, SyntheticSpec().num_classes) == (100_000, 8)


def test_patience_is_checked():
    from mpignn.errors import ConfigError

    with pytest.raises(ConfigError, match="--patience expected evaluations >= 0; got -1"):
        parse(["--patience", "-1"])
    assert TrainConfig().epochs == 0 and TrainConfig().patience == 0  # the bare run: the converge rule's


@pytest.mark.parametrize("steps,epochs,every,evals,patience", [
    (30, 10, 1, 1, 3),  # the embedded graph: an evaluation an epoch, at most STEP_BUDGET steps
    (1, 300, 5, 1, 10),  # full-graph training: an epoch is a step, evaluated every 5, patience 50 steps
    (5000, 1, 1, 25, 3),  # a huge graph: one epoch, evaluated every 200 steps inside it
])
def test_without_epochs_the_schedule_follows_the_epochs_length(steps, epochs, every, evals, patience):
    from mpignn.training import schedule as converge

    plan = converge.schedule(TrainConfig(), steps)
    assert (plan.epochs, plan.eval_every, plan.evals_per_epoch, plan.patience) == (epochs, every, evals, patience)
    assert plan.min_delta == converge.MIN_DELTA and plan.budget == max(steps, converge.STEP_BUDGET // steps * steps)
    asked = converge.schedule(parse(["--epochs", "7", "--patience", "4"]), steps)
    assert (asked.epochs, asked.patience, asked.min_delta, asked.budget) == (7, 4, 0.0, 0)  # as asked, as before


@pytest.fixture(scope="module")
def plateaus(tmp_path_factory):
    """The two 1-rank runs below, in one job. lr 1e-30 leaves every weight as it is and whole neighbourhoods
    (-1) make evaluation deterministic, so validation never beats epoch 0."""
    base = tmp_path_factory.mktemp("plateau")
    common = ["--root", base, "--dataset", TINY, "--lr", "1e-30", "--fanout=-1,-1", "--hidden", "16"]
    runs = train_runs(1, base, common, {
        "converge": ["--batch-size", "8", "--minibatch", "independent"],
        "patience": ["--epochs", "20", "--patience", "2", "--batch-size", "128", "--checkpoint-dir", base / "ck"]})
    return lambda name: (*records(base, runs, name), base)


@pytest.mark.mpi
def test_without_epochs_a_run_stops_on_its_own_and_says_why(plateaus):
    # validation never moves, so the converge rule's patience (3 evaluations) ends the run
    recs, out, _ = plateaus("converge")
    assert [r["epoch"] for r in recs] == [0, 1, 2, 3], out[-3000:]
    assert "training until validation (evaluated 1x per epoch) stops improving by 0.002 for 3 evaluations" in out
    assert "has not improved by 0.002 for 3 evaluations (best" in out and "stopping after epoch 3" in out


@pytest.mark.mpi
def test_patience_stops_a_plateau_and_keeps_the_best_epoch(plateaus):
    # validation never beats epoch 0: with --patience 2 the run stops after epoch 2, not 20
    recs, out, base = plateaus("patience")
    ck = base / "ck"
    assert [r["epoch"] for r in recs] == [0, 1, 2], out[-3000:]
    assert len({r["val_acc"] for r in recs}) == 1 and all(r["best_epoch"] == 0 for r in recs)
    assert "has not improved for --patience 2 evaluations" in out, out[-3000:]
    final = next(line for line in out.splitlines() if line.startswith("final test accuracy"))
    assert f"final test accuracy {recs[0]['test_acc']:.4f} at best val epoch 0" in final, final
    # gen-000001 (after epoch 0) was pruned by --keep-checkpoints 2; best/ still holds it
    assert [g.name for g in generations(ck)] == ["gen-000002", "gen-000003"]
    manifest = json.loads((ck / "best" / MANIFEST).read_text())
    assert (manifest["generation"], manifest["epoch"]) == (1, 1), manifest
    state = torch.load(ck / "best" / "checkpoint.pt", weights_only=True)
    assert state["extra"]["best"]["epoch"] == 0 and state["extra"]["stale"] == 0


def test_best_copy_replaces_the_previous_one(tmp_path):
    from mpignn.training.run_files import keep_best

    for number in (1, 2):
        gen = tmp_path / f"gen-{number:06d}"
        gen.mkdir()
        (gen / "checkpoint.pt").write_bytes(b"x" * number)
        keep_best(gen, str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "gen-000001", "gen-000002"]
    assert (tmp_path / "best" / "checkpoint.pt").read_bytes() == b"xx"


