"""A run's own files (`training.run_files`): a checkpoint folder belongs to one run and one live job, outputs are
checked before training, and a failed write is one agreed line on every rank with nothing half-written left.
Tier 2 on COMM_SELF, then Tier 3 replays on 2 ranks of `python -m mpignn.train`."""
import errno
import os
import signal
import subprocess
import sys

import pytest
import torch

from _config import parse
from _mpirun import run_cli_many, run_python
from mpignn.errors import ConfigError, is_agreed
from mpignn.training.checkpoint import generations, save_state
from mpignn.training.run_files import (FolderLock, check_outputs, claim_checkpoint_dir, keep_best, on_behalf,
                                       report_epoch)


@pytest.fixture()
def comm():
    from mpi4py import MPI

    return MPI.COMM_SELF


def _a_finished_run(comm, folder):
    model = torch.nn.Linear(3, 2)
    save_state(comm, folder, epoch=1, step=0, model=model, optimizer=torch.optim.Adam(model.parameters()),
               device="cpu", extra={})


def _listing(folder):
    """The checkpoints' files and their times (not the lock, which each claim writes its holder into)."""
    return sorted((str(p.relative_to(folder)), p.stat().st_mtime_ns) for p in folder.rglob("*")
                  if p.is_file() and p.name != ".mpignn-lock")


def test_another_runs_folder_is_refused_unless_resumed_or_started_over(comm, tmp_path):
    ck = tmp_path / "ck"
    _a_finished_run(comm, ck)
    before = _listing(ck)
    with pytest.raises(ConfigError, match="holding another run's checkpoint gen-000001 .epoch 1, step 0.. HINT: "
                                          "add --resume to continue it, --force-new") as err:
        claim_checkpoint_dir(comm, parse(["--checkpoint-dir", str(ck)]), resuming=False)
    assert is_agreed(err.value) and _listing(ck) == before
    claim_checkpoint_dir(comm, parse(["--checkpoint-dir", str(ck), "--resume"]), resuming=True).release()
    claim_checkpoint_dir(comm, parse(["--checkpoint-dir", str(ck), "--force-new"]), resuming=False).release()
    assert generations(ck) == [] and not (ck / "best").exists()
    with pytest.raises(ConfigError, match="--resume continues the run in --checkpoint-dir and --force-new"):
        parse(["--checkpoint-dir", str(ck), "--resume", "--force-new"])


@pytest.mark.parametrize("torn", ['{"epoch": 3,', "[]"])
def test_another_runs_corrupt_manifest_is_refused_in_one_line_and_force_new_removes_it(comm, tmp_path, torn):
    ck = tmp_path / "ck"
    _a_finished_run(comm, ck)
    (ck / "gen-000001" / "manifest.json").write_text(torn)
    with pytest.raises(ConfigError, match=r"holding another run's checkpoint gen-000001 \(its manifest.json is "
                                          r"corrupt: (JSONDecodeError|ValueError)\). HINT: add --resume") as err:
        claim_checkpoint_dir(comm, parse(["--checkpoint-dir", str(ck)]), resuming=False)
    assert is_agreed(err.value) and "\n" not in str(err.value)
    claim_checkpoint_dir(comm, parse(["--checkpoint-dir", str(ck), "--force-new"]), resuming=False).release()
    assert generations(ck) == []


def test_a_live_job_holds_the_folder_and_a_dead_ones_leftover_does_not(comm, tmp_path):
    ck = tmp_path / "ck"
    ck.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from mpignn.training.run_files import FolderLock; "
                               f"assert FolderLock(Path({str(ck)!r})).acquire() == ''; print('held', flush=True); "
                               "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"locked by pid {holder.pid} on .*HINT: wait for that job"):
            claim_checkpoint_dir(comm, parse(["--checkpoint-dir", str(ck)]), resuming=False)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (ck / ".mpignn-lock").exists()  # the dead job's file stays and holds nothing
    lock = claim_checkpoint_dir(comm, parse(["--checkpoint-dir", str(ck)]), resuming=False)
    assert FolderLock(ck).acquire() != ""  # held by this process now (a second open file is refused)
    lock.release()


def test_outputs_are_checked_before_training(comm, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="--metrics-out expected a folder it can write in"):
        check_outputs(comm, parse(["--metrics-out", str(blocker / "m.jsonl")]), 0)
    check_outputs(comm, parse(["--metrics-out", str(tmp_path / "new" / "deeper" / "m.jsonl")]), 0)
    assert (tmp_path / "new" / "deeper").is_dir()  # a missing folder is made, not a traceback after an epoch
    ck = tmp_path / "ck"
    ck.mkdir()
    monkeypatch.setattr("shutil.disk_usage", lambda p: type("U", (), {"free": 5 * 2**20})())
    with pytest.raises(ConfigError, match=r"room for a checkpoint generation \(about 9.5 MiB\); got 5.0 MiB free"):
        check_outputs(comm, parse(["--checkpoint-dir", str(ck)]), 10 * 10**6)


def test_a_failed_metrics_append_is_one_agreed_line(comm):
    cfg = parse(["--metrics-out", "/dev/full"])  # every write: ENOSPC
    with pytest.raises(ConfigError) as err:
        report_epoch(comm, cfg, {"epoch": 3, "loss": 1.0}, lambda: None)
    assert "expected to write epoch 3's record" in str(err.value) and "No space left on device" in str(err.value)
    assert "\n" not in str(err.value) and is_agreed(err.value)


def test_a_failed_best_copy_leaves_no_temporary_folder_and_keeps_the_old_best(comm, tmp_path, monkeypatch):
    for number in (1, 2):
        (tmp_path / f"gen-{number:06d}").mkdir()
        (tmp_path / f"gen-{number:06d}" / "checkpoint.pt").write_bytes(b"x" * number)
    keep_best(tmp_path / "gen-000001", str(tmp_path))

    def full(src, dst, **kw):
        os.makedirs(dst)
        (dst / "checkpoint.pt").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("shutil.copytree", full)
    with pytest.raises(ConfigError, match="a copy of gen-000002 to best/; got OSError.*gen-000002 holds the same weights"):
        on_behalf(comm, lambda: keep_best(tmp_path / "gen-000002", str(tmp_path)), "a copy of gen-000002 to best/",
                  "free space there; gen-000002 holds the same weights")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "gen-000001", "gen-000002"]
    assert (tmp_path / "best" / "checkpoint.pt").read_bytes() == b"x"


ARGS = ["--dataset", "synthetic:num_nodes=3000,avg_degree=8,num_features=16", "--hidden", "16", "--batch-size",
        "256", "--fanout", "4,3", "--threads", "1", "--epochs", "1"]


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """A finished 2-rank run in ck/, its listing, then one job of runs each refused on every rank: another run
    into ck/, metrics to a full disk, a root below a file, metrics below a file beside a --checkpoint-dir ({name:
    (exit codes, output)})."""
    base = tmp_path_factory.mktemp("refused")
    train = ["--root", str(base), *ARGS]
    rc, out = run_python(2, ["-m", "mpignn.train", *train, "--checkpoint-dir", str(base / "ck")],
                         timeout=180)
    assert rc == 0, out[-3000:]
    before = _listing(base / "ck")
    blocker = base / "a-file"  # root runs these tests, so a folder it cannot write is a file in the path
    blocker.write_text("")
    runs = run_cli_many(2, {
        "again": ["mpignn.train", *train, "--checkpoint-dir", base / "ck"],
        "full-disk": ["mpignn.train", *train, "--metrics-out", "/dev/full"],
        "unwritable": ["mpignn.train", "--root", blocker / "data", *ARGS],
        "metrics-below-file": ["mpignn.train", *train, "--checkpoint-dir", base / "ck2", "--metrics-out",
                               blocker / "m.jsonl"]}, base / "out")
    return base, before, runs


@pytest.mark.mpi
def test_a_new_run_in_a_finished_runs_folder_is_refused_on_every_rank(refused):
    base, before, runs = refused
    codes, out = runs["again"]
    assert codes == [1, 1] and out.count("holding another run's checkpoint gen-000001") == 2, out[-3000:]
    assert "Traceback" not in out and _listing(base / "ck") == before


@pytest.mark.mpi
def test_a_full_disk_under_metrics_out_ends_every_rank_in_one_line(refused):
    codes, out = refused[2]["full-disk"]
    assert codes == [1, 1] and out.count("expected to write epoch 0's record (--metrics-out /dev/full") == 2, \
        out[-3000:]
    assert "Traceback" not in out, out[-3000:]


@pytest.mark.mpi
def test_an_unwritable_root_is_one_line_on_every_rank_not_a_traceback(refused):
    codes, out = refused[2]["unwritable"]
    assert codes == [1, 1] and out.count("--root expected a folder where synthetic:") == 2, out[-3000:]
    assert "NotADirectoryError" in out and "Traceback" not in out, out[-3000:]


@pytest.mark.mpi
def test_an_unwritable_metrics_out_beside_a_checkpoint_dir_is_one_line_on_every_rank(refused):
    """Rank 0 finds the problem, yet every rank still takes the checkpoint folder's host survey (a collective)."""
    codes, out = refused[2]["metrics-below-file"]
    assert codes == [1, 1] and out.count("--metrics-out expected a folder it can write in") == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
