"""The sbatch scripts: syntax, required headers, and a real run under an imitated Slurm allocation."""
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _mpirun import ROOT, clean_env, mpiexec, run_cmd
from mpignn.launch.allocator import preload_env

SCRIPTS = sorted((ROOT / "jobs").glob("*.sbatch"))
SHELL = [*SCRIPTS, ROOT / "jobs" / "_common.sh", ROOT / "jobs" / "pipeline.sh", ROOT / "jobs" / "gpu_check.sh"]
SMALL = ["--dataset", "synthetic:num_nodes=3000,avg_degree=8,num_features=8", "--epochs", "1", "--hidden", "16",
         "--batch-size", "128", "--fanout", "5,5"]


@pytest.mark.parametrize("path", SHELL, ids=lambda p: p.name)
def test_bash_syntax(path):
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (apt-get install shellcheck)")
def test_shellcheck():
    res = subprocess.run(["shellcheck", "-x", *map(str, SHELL)], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_headers(path):
    text = path.read_text()
    assert text.startswith("#!/bin/bash\n")
    for needle in ("#SBATCH --job-name=", "#SBATCH --nodes=", "#SBATCH --ntasks-per-node=", "#SBATCH --time=",
                   "#SBATCH --output=logs/%x-%j.out", "set -euo pipefail", "source jobs/_common.sh", "job_header"):
        assert needle in text, f"{path.name} lacks {needle!r}"
    assert "#SBATCH --ntasks=" not in text and "MASTER_PORT" not in text and "MASTER_ADDR" not in text


def _slurm(tmp_path: Path) -> dict:
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shim = shim_dir / "srun"
    # srun stand-in: drop srun's own options, run the command under mpiexec with SLURM_NTASKS ranks.
    shim.write_text(f'#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\n'
                    f'exec {mpiexec()} -launcher fork -n "$SLURM_NTASKS" "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = clean_env(MPIEXEC_TIMEOUT="200")
    env.update(SLURM_JOB_ID="4242", SLURM_JOB_NAME="mpignn-test", SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2",
               SLURM_CPUS_PER_TASK="1", SLURM_JOB_NUM_NODES="1", SLURM_NNODES="1", SLURM_JOB_NODELIST="localhost",
               SLURM_SUBMIT_DIR=str(ROOT), PATH=f"{shim_dir}:{os.path.dirname(sys.executable)}:{env['PATH']}")
    return env


@pytest.mark.mpi
@pytest.mark.parametrize("script,extra", [("cpu.sbatch", []), ("cuda.sbatch", ["--device", "cpu", "--backend", "gloo"]),
                                          ("xpu.sbatch", ["--device", "cpu", "--backend", "gloo"])])
def test_script_runs_under_imitated_slurm(tmp_path, script, extra):
    rc, out = run_cmd(["bash", str(ROOT / "jobs" / script), *SMALL, "--root", str(tmp_path / "data"), *extra],
                      timeout=240, env=_slurm(tmp_path), cwd=ROOT)
    assert rc == 0, out[-3000:]
    assert "== job 4242" in out and "== MPI:" in out and "final test accuracy" in out and "(2 ranks)" in out
    found = preload_env("tcmalloc")  # the job preloads it where the host has it, and the run log says so
    assert ("malloc: tcmalloc (preloaded)" if found else "malloc: glibc, blocks of 256 KiB") in out, out[-3000:]


@pytest.mark.mpi
def test_script_exit_code_reflects_failure(tmp_path):
    rc, out = run_cmd(["bash", str(ROOT / "jobs" / "cpu.sbatch"), "--dataset", "no-such-dataset", "--root",
                       str(tmp_path)], timeout=120, env=_slurm(tmp_path), cwd=ROOT)
    assert rc != 0 and "unknown dataset" in out and "== done" not in out


def test_the_job_preloads_a_malloc_it_finds_and_keeps_a_preload_it_is_given(tmp_path):
    libs = tmp_path / "lib"
    libs.mkdir()
    for name in ("libjemalloc.so.2", "libtcmalloc_minimal.so.4"):
        (libs / name).write_bytes(b"")

    def preloaded(**extra):
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MPIGNN_PRELOAD", "MALLOC_CONF")}
        env.update(SLURM_NTASKS="2", MPIGNN_LIB_DIRS=str(libs), **extra)
        script = f'source "{ROOT / "jobs" / "_common.sh"}" && echo "${{LD_PRELOAD:-}}|${{MALLOC_CONF:-}}"'
        res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()

    assert preloaded() == f"{libs}/libtcmalloc_minimal.so.4|"
    assert preloaded(MPIGNN_PRELOAD="jemalloc") == \
        f"{libs}/libjemalloc.so.2|oversize_threshold:1,background_thread:true,metadata_thp:auto"
    assert preloaded(LD_PRELOAD="/site/libxalt.so") == "/site/libxalt.so|"  # the site's stays, nothing added
    assert preloaded(MPIGNN_PRELOAD="none") == "|"
    assert preloaded(MPIGNN_PRELOAD="mimalloc") == "|"  # not on this host: glibc


def test_srun_kills_the_step_on_a_bad_exit(tmp_path):
    """`launch` under srun passes --kill-on-bad-exit=1: a dead rank ends the step instead of leaving the others
    blocked (srun's own default keeps them running)."""
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shim = shim_dir / "srun"
    shim.write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')  # records srun's arguments, one per line
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, SLURM_NTASKS="2", SLURM_CPUS_PER_TASK="1", PATH=f"{shim_dir}:{os.environ['PATH']}")
    env.pop("MPIGNN_LAUNCHER", None)
    script = f'source "{ROOT / "jobs" / "_common.sh"}" && launch python -m mpignn.train'
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    args = res.stdout.split("\n")
    assert res.returncode == 0 and "--kill-on-bad-exit=1" in args, res.stdout + res.stderr
    assert args.index("--kill-on-bad-exit=1") < args.index("python"), args


def _fake_sbatch(tmp_path: Path) -> dict:
    """An `sbatch` that records each submission (one line of arguments) and answers job ids 101, 102, ..."""
    shim_dir = tmp_path / "sbin"
    shim_dir.mkdir()
    shim = shim_dir / "sbatch"
    shim.write_text(f'#!/bin/bash\necho "$*" >> "{tmp_path}/submitted"\n'
                    f'echo $((100 + $(wc -l < "{tmp_path}/submitted")))\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    return dict(os.environ, PATH=f"{shim_dir}:{os.environ['PATH']}")


def test_pipeline_chains_partition_training_and_predict(tmp_path):
    env = {**_fake_sbatch(tmp_path), "PREDICT_OUT": "/o/pred"}
    res = subprocess.run(["bash", str(ROOT / "jobs" / "pipeline.sh"), "Cora", "/r", "/p", "4", "cuda", "--epochs",
                          "3", "--checkpoint-dir", "/c"], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    part, train, predict = (tmp_path / "submitted").read_text().splitlines()
    assert part.startswith("--parsable jobs/partition.sbatch --dataset Cora --root /r --num-parts 4 --out /p")
    assert train == ("--parsable --dependency=afterok:101 jobs/cuda.sbatch --dataset Cora --root /r --partitions /p "
                     "--epochs 3 --checkpoint-dir /c")
    assert predict == ("--parsable --dependency=afterok:102 jobs/predict.sbatch --checkpoint-dir /c --out /o/pred "
                       "--root /r --partitions /p")
    assert "predict job 103" in res.stdout


def test_pipeline_refuses_a_predict_step_without_checkpoints(tmp_path):
    env = {**_fake_sbatch(tmp_path), "PREDICT_OUT": "/o/pred"}
    res = subprocess.run(["bash", str(ROOT / "jobs" / "pipeline.sh"), "Cora", "/r", "/p", "4"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and "expects --checkpoint-dir DIR" in res.stderr and "HINT" in res.stderr
    assert not (tmp_path / "submitted").exists()  # nothing submitted


@pytest.mark.mpi
def test_predict_script_runs_after_training_under_imitated_slurm(tmp_path):
    env, root, ck = _slurm(tmp_path), str(tmp_path / "data"), str(tmp_path / "ck")
    rc, out = run_cmd(["bash", str(ROOT / "jobs" / "cpu.sbatch"), *SMALL, "--root", root, "--checkpoint-dir", ck],
                      timeout=240, env=env, cwd=ROOT)
    assert rc == 0, out[-3000:]
    rc, out = run_cmd(["bash", str(ROOT / "jobs" / "predict.sbatch"), "--checkpoint-dir", ck, "--out",
                       str(tmp_path / "pred")], timeout=240, env=env, cwd=ROOT)
    assert rc == 0 and "== done: exit 0" in out, out[-3000:]
    from mpignn.predict import load

    got = load(tmp_path / "pred")
    assert len(got["node_id"]) == 3000 and (np.diff(got["node_id"]) == 1).all() and len(got["pred"]) == 3000


def test_gpu_check_runs_each_step_keeps_its_log_and_names_the_failed_ones(tmp_path):
    """jobs/gpu_check.sh with shims for python and mpiexec (each logs its arguments; the one given FAIL=WORD
    fails where WORD is among them, SLOW=WORD sleeps past LIMIT): every step runs whatever an earlier one did."""
    shim = tmp_path / "shim"
    shim.write_text('#!/bin/bash\necho "ran: $*"\n'
                    'if [[ -n ${SLOW:-} && " $* " == *" $SLOW "* ]]; then sleep 5; fi\n'
                    'if [[ -n ${FAIL:-} && " $* " == *" $FAIL "* ]]; then exit 3; fi\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)

    def check(out, **env):
        return subprocess.run(["bash", str(ROOT / "jobs" / "gpu_check.sh"), str(out)], capture_output=True,
                              text=True, cwd=ROOT, timeout=60,
                              env={**os.environ, "PYTHON": str(shim), "MPIEXEC": str(shim), "LIMIT": "2", **env})

    res = check(tmp_path / "ok")
    assert res.returncode == 0 and "every step passed" in res.stdout, res.stdout + res.stderr
    logs = {p.stem: p.read_text() for p in (tmp_path / "ok").glob("*.log")}
    assert sorted(logs) == ["bench-epoch", "env", "pytest-gpu", "train"]
    assert "-m pytest -m gpu" in logs["pytest-gpu"] and "--device cuda --epochs 5" in logs["train"]
    assert "mpignn.bench.epoch --device cuda" in logs["bench-epoch"]
    res = check(tmp_path / "bad", FAIL="pytest", SLOW="mpignn.bench.epoch", DEVICE="xpu")
    assert res.returncode == 1 and "failed: pytest-gpu bench-epoch" in res.stdout, res.stdout
    assert "exit 3 after" in res.stdout and "exit 124 after" in res.stdout
    assert "--device xpu" in (tmp_path / "bad" / "train.log").read_text()

