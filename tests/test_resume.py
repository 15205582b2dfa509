"""Checkpoints and resume: bit-for-bit replay on the same world size (also from the middle of an epoch, after
SIGUSR2), refusal of another model shape, continuation on another world size."""
import json
import os
import re
import shutil
import signal
import time

import pytest
import torch

from _mpirun import PooledRun, run_cli_many, run_python
from mpignn.training.checkpoint import latest_checkpoint

pytestmark = pytest.mark.mpi

ARGS = ["--dataset", "synthetic:num_nodes=3000,avg_degree=8,num_features=16", "--hidden", "16", "--batch-size",
        "64", "--fanout", "5,5", "--lr", "0.01", "--dropout", "0.5",  # dropout: the torch RNG matters
        "--minibatch", "independent"]  # not `auto`, whose pick is timed: the runs compared must train alike
LEARNED = ("loss", "train_acc", "val_acc", "test_acc", "best_epoch", "best_val_acc", "test_acc_at_best_val",
           "remote_feature_bytes", "remote_structure_bytes")


def _train(n, root, *extra, rc=0):
    code, out = run_python(n, ["-m", "mpignn.train", "--root", str(root), *ARGS, *extra],
                           timeout=150)
    assert code == rc, out[-3000:]
    return out


def _weights(folder):
    return torch.load(latest_checkpoint(folder) / "checkpoint.pt", weights_only=True)["model"]


def _learned(path, epoch_ends=False):
    """The learned values of each record (`epoch_ends`: of the records at the end of an epoch only)."""
    records = [r for r in map(json.loads, path.read_text().splitlines()) if not (epoch_ends and "step" in r)]
    return [{k: r[k] for k in ("epoch", *LEARNED)} for r in records]


def _assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The runs the two tests below read, in order, one job per world size: {name: (exit codes, output)}, and
    their folder. The 3-rank run continues a copy of the 2-rank checkpoint, so that one stays as it was."""
    base = tmp_path_factory.mktemp("resume")

    def train(*extra):
        return ["mpignn.train", "--root", base, *ARGS, *extra]

    ck, auto = base / "ck", base / "auto"
    results = run_cli_many(2, {
        "full": train("--epochs", "3", "--checkpoint-dir", base / "full", "--metrics-out", base / "full.jsonl"),
        # stopped after one epoch, evaluating three times in it
        "stopped": train("--epochs", "1", "--evals-per-epoch", "3", "--checkpoint-dir", ck,
                         "--metrics-out", base / "ck.jsonl"),
        "resumed": train("--epochs", "3", "--checkpoint-dir", ck, "--resume", "--metrics-out", base / "ck.jsonl"),
        "other-shape": train("--epochs", "5", "--checkpoint-dir", ck, "--resume", "--hidden", "32"),
        "auto-first": train("--epochs", "1", "--checkpoint-dir", auto, "--minibatch", "cooperative"),
        "auto-resumed": train("--epochs", "2", "--checkpoint-dir", auto, "--resume", "--minibatch", "auto"),
    }, base / "out2", timeout=600)
    shutil.copytree(ck, base / "ck3")
    results.update(run_cli_many(3, {"three": train("--epochs", "4", "--checkpoint-dir", base / "ck3", "--resume")},
                                base / "out3"))
    results.update(run_cli_many(1, {"auto-one": train("--epochs", "3", "--checkpoint-dir", auto, "--resume",
                                                      "--minibatch", "auto")}, base / "out1"))
    return base, results


def _out(runs, name, rc=0):
    codes, out = runs[1][name]
    assert set(codes) == {rc}, out[-3000:]
    return out


def test_resume_replays_the_uninterrupted_run_bit_for_bit(runs):
    base = runs[0]
    _out(runs, "full")
    # stopped after one epoch, evaluating three times in it (records at 1/3, 2/3 and the end of the epoch:
    # evaluating inside the epoch changes nothing the resumed run replays)
    out = _out(runs, "stopped")
    k3 = [json.loads(line) for line in (base / "ck.jsonl").read_text().splitlines()][:3]
    assert [round(r["epochs_done"] * 3) for r in k3] == [1, 2, 3] and all(r["val_acc"] is not None for r in k3)
    assert "step" in k3[0] and "step" not in k3[2] and re.search(r"epoch   0 step \d+ \|", out)
    out = _out(runs, "resumed")
    assert "resumed from" in out and "at epoch 1 step 0 (RNG states restored)" in out and "epoch   0 |" not in out
    _assert_same_weights(_weights(base / "full"), _weights(base / "ck"))
    # epoch 0's record of the stopped run covers only its last third (it evaluated inside the epoch)
    assert _learned(base / "full.jsonl")[1:] == _learned(base / "ck.jsonl", epoch_ends=True)[1:]

    state = torch.load(latest_checkpoint(base / "ck") / "checkpoint.pt", weights_only=True)  # tensors only
    assert state["rng"]["cpu"].shape[0] == 2 and state["extra"]["config"]["hidden"] == 16

    # another world size continues from the same checkpoint (the data order differs, so results do too)
    out = _out(runs, "three")
    assert "at epoch 3 step 0 (another world size" in out and "epoch   3 |" in out and "final test accuracy" in out

    # another model shape is refused on every rank with the fix
    out = _out(runs, "other-shape", rc=1)
    for rank in (0, 1):
        assert f"[rank {rank}] rank 0: --resume expects the model flags of the checkpoint; got --hidden 32 " \
               "(checkpoint: 16). HINT:" in out, out[-2000:]


def test_auto_resumes_the_mode_its_checkpoint_trained(runs):
    """`--minibatch auto` with a resume continues the checkpoint's mode instead of timing the modes again (a
    resumed run replays the uninterrupted one); where that mode cannot train the run (cooperative on one rank),
    it times them."""
    _out(runs, "auto-first")
    out = _out(runs, "auto-resumed")
    assert "--minibatch auto: cooperative (the checkpoint's: the resumed run trains as it did)" in out, out[-2000:]
    assert "passes of" not in out and "epoch   1 |" in out
    out = _out(runs, "auto-one")
    assert "(the checkpoint's" not in out and "--minibatch auto:" in out and "epoch   2 |" in out


def _start(n, root, *extra):
    """A training run in the standing n-rank job, every rank logging, for a test to signal mid-run."""
    return PooledRun(n, ["-m", "mpignn.train", "--root", root, *ARGS, *extra], MPIGNN_LOG_RANKS="all")


def _signal_one_rank_once_training(run, delay=0.1, signum=signal.SIGUSR2):
    deadline = time.monotonic() + 90
    while "epoch   0 |" not in run.output():  # mid-way through epoch 1 after this line, mostly
        assert time.monotonic() < deadline, run.output()[-3000:]
        time.sleep(0.05)
    time.sleep(delay)
    os.kill(run.pids[-1], signum)  # one rank sees it; the ranks agree at the next step
    return run.pids


def _wait(run, timeout=60):
    rc, out = run.wait(timeout)
    assert rc != -1, "run hung after the signal, or its job ended:\n" + out[-3000:]
    return rc, out


SIGNALS = [signal.SIGUSR2, signal.SIGTERM]  # Slurm's warning; scancel, a time limit
STOPPED = ["--epochs", "3", "--batch-size", "16"]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """For each of SIGNALS a 2-rank run stopped by it (its exit code, output and the (epoch, step) of the
    checkpoint it saved, and what else it saved); then one job resumes each and
    trains the uninterrupted run (`run_cli_many`'s results); and their folder."""
    base = tmp_path_factory.mktemp("stopped")
    live = {}
    for signum in SIGNALS:
        run = _start(2, base, *STOPPED, "--checkpoint-dir", base / f"ck-{signum.name}")
        _signal_one_rank_once_training(run, signum=signum)
        rc, out = _wait(run)
        folder = base / f"ck-{signum.name}"
        saved = torch.load(latest_checkpoint(folder) / "checkpoint.pt", weights_only=True) if rc == 75 else {}
        live[signum.name] = (rc, out, (saved.get("epoch"), saved.get("step")),  # before the resume saves more
                             saved.get("extra", {}))
    train = ["mpignn.train", "--root", base, *ARGS, *STOPPED, "--checkpoint-dir"]
    cases = {f"resume-{s.name}": [*train, base / f"ck-{s.name}", "--resume"] for s in SIGNALS}
    cases["full"] = [*train, base / "full"]
    return base, live, run_cli_many(2, cases, base / "out", timeout=600)


@pytest.mark.parametrize("signum", SIGNALS)
def test_a_stop_signal_stops_every_rank_at_one_step_saves_and_resume_finishes(stopped, signum):
    base, live, resumed = stopped
    ck, name = base / f"ck-{signum.name}", signum.name
    rc, out, saved, extra = live[name]
    assert rc == 75, out[-3000:]
    stops = [l.split("stopping at ")[1].strip() for l in out.splitlines() if "stopping at epoch" in l]
    assert len(stops) == 2 and stops[0] == stops[1], out[-3000:]  # each rank logs where it stopped
    epoch, step = int(stops[0].split()[1]), int(stops[0].split()[3])
    print(f"stopped at epoch {epoch} step {step}")  # mid-epoch (step > 0) in the runs here
    assert f"stopped by {name} at epoch {epoch} step {step}; checkpoint in {ck}; resume with --resume" in out
    assert saved == (epoch, step)
    # what early stopping counts (evaluations since the best, the score it improved to) is saved too, so a resumed
    # run stops where the uninterrupted one would: one evaluation per epoch here, epochs before `epoch` evaluated
    best = extra["best"]
    assert (extra.get("stale"), extra.get("ref")) == (epoch - 1 - best["epoch"], best["val_acc"]), extra
    codes, out = resumed[f"resume-{name}"]
    assert codes == [0, 0], out[-3000:]
    assert f"at epoch {epoch} step {step} (RNG states restored)" in out and "final test accuracy" in out
    assert resumed["full"][0] == [0, 0], resumed["full"][1][-3000:]
    _assert_same_weights(_weights(base / "full"), _weights(ck))


def test_sigusr2_without_checkpoint_dir_stops_cleanly_and_says_nothing_was_saved(tmp_path):
    run = _start(2, tmp_path, "--epochs", "50")
    _signal_one_rank_once_training(run)
    rc, out = _wait(run)
    assert rc == 75 and "; nothing saved (no --checkpoint-dir)" in out and "Traceback" not in out, out[-3000:]


def test_ctrl_c_ends_every_rank_with_one_line_and_no_traceback(tmp_path):
    run = _start(2, tmp_path, "--epochs", "50")
    for pid in _signal_one_rank_once_training(run, signum=signal.SIGINT)[:-1]:
        os.kill(pid, signal.SIGINT)  # a terminal's Ctrl-C reaches every rank
    rc, out = run.wait(60)
    assert rc != 0 and "interrupted (SIGINT); the work since the last checkpoint is lost. HINT:" in out, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
