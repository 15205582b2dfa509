"""--tensorboard DIR: rank 0's event file read back with TensorBoard's own reader, and the one-line error
naming the extra when the package is missing."""
import json
import sys

import pytest

from _mpirun import run_cli_here
from mpignn.errors import ConfigError
from _records import FIELDS

SMALL = "synthetic:num_nodes=2000,avg_degree=6,num_features=4"


def test_scalars_and_steps_read_back(tmp_path):
    pytest.importorskip("tensorboard", reason="pip install mpignn[tensorboard] (in the test extra)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb, metrics = tmp_path / "tb", tmp_path / "m.jsonl"
    code, out = run_cli_here("mpignn.train", [
        "--dataset", SMALL, "--root", tmp_path / "data", "--epochs", "2", "--evals-per-epoch", "2", "--batch-size",
        "256", "--fanout", "4,3", "--hidden", "16",
        "--minibatch", "independent",  # several steps an epoch: `auto` may pick full-graph, one step an epoch
        "--tensorboard", tb, "--metrics-out", metrics], cwd=tmp_path)
    assert code == 0, out[-3000:]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert len(records) == 4  # two evaluations in each of two epochs

    acc = EventAccumulator(str(tb))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for name in FIELDS:  # every numeric field the report formats, under its section
        assert any(t.endswith("/" + name) for t in tags), (name, sorted(tags))
    for tag in ("loss/loss", "score/val_acc", "score/test_acc", "time/sample_s", "time/epoch_s",
                "bytes/remote_feature_bytes", "throughput/seeds_per_s", "memory/peak_rss_mb"):
        assert tag in tags
    loss = acc.Scalars("loss/loss")
    assert [e.step for e in loss] == [1, 2, 3, 4]  # each evaluation inside an epoch has its own step
    for tag in ("loss/loss", "score/val_acc", "run/epochs_done", "memory/peak_rss_mb", "time/compute_s"):
        got = [e.value for e in acc.Scalars(tag)]
        want = [r[tag.split("/")[1]] for r in records]
        assert got == pytest.approx(want, rel=1e-6, abs=1e-6), tag
    done = [e.value for e in acc.Scalars("run/epochs_done")]
    assert 0 < done[0] < 1 == done[1] < done[2] < 2 == done[3]  # mid-epoch, end, mid-epoch, end


@pytest.fixture
def no_tensorboard(monkeypatch):
    """`import tensorboard...` raises ImportError, as where the package is not installed."""
    for name in [m for m in sys.modules if m == "tensorboard" or m.startswith("tensorboard.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tensorboard", None)


def test_missing_package_fails_up_front_naming_the_extra(no_tensorboard):
    from _config import parse
    from mpignn.training.fit import check_flags
    from mpignn.tasks import make_task

    cfg = parse(["--dataset", SMALL, "--tensorboard", "tb"])
    with pytest.raises(ConfigError) as err:
        check_flags(cfg, make_task(cfg))
    msg = str(err.value)
    assert "\n" not in msg and "pip install mpignn[tensorboard]" in msg and "--tensorboard" in msg
    check_flags(parse(["--dataset", SMALL]), make_task())  # without the flag nothing is imported or refused


def test_missing_package_cli_exits_with_one_line(tmp_path, no_tensorboard):
    """The whole CLI: exit code 1 and the message, before any data is loaded."""
    code, out = run_cli_here("mpignn.train", ["--dataset", SMALL, "--root", tmp_path / "data", "--tensorboard",
                                              tmp_path / "tb"], cwd=tmp_path)
    assert code == 1, out
    assert "pip install mpignn[tensorboard]" in out
    assert not (tmp_path / "data").exists() and not (tmp_path / "tb").exists()
