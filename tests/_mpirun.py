"""Run a worker script under `mpiexec -n N` with a hard timeout (the Tier-3 helper of STYLE.md §9)."""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mpignn.env import mpiexec_path

ROOT = Path(__file__).resolve().parents[1]
WORKERS = Path(__file__).resolve().parent / "mpi_workers"
SHARED = ROOT.parent / "shared"


def mpiexec() -> str:
    exe = mpiexec_path()
    if exe is None:  # CI installs the README's way, so there a missing mpiexec is a broken install, not a skip
        ci = os.environ.get("CI", "").lower() in ("1", "true")
        (pytest.fail if ci else pytest.skip)("no mpiexec; pip install -e .[test] (brings the mpich wheel)")
    return exe


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_", "OMPI_", "HYDRA_", "PMIX_"))}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MPIGNN_LOG_RANKS=env.get("MPIGNN_LOG_RANKS", "0"))
    # MPICH's blocking calls spin a core while they wait; the suite runs up to 8 ranks on 2 cores, where a
    # spinning rank takes the core of one with work. Yielding saved 8% of the suite's CPU-s (tests/README.md).
    env.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    env.update(extra)
    return env


def multihost_env(**extra: str) -> dict[str, str]:
    """`clean_env` with this interpreter's folder first on PATH: multihost-mpirun finds mpiexec and its proxy
    there (the mpich wheel's)."""
    env = clean_env(**extra)
    env["PATH"] = f"{os.path.dirname(sys.executable)}:{env['PATH']}"
    return env


def run_cmd(cmd: list[str], timeout: float, env: dict[str, str] | None = None,
            cwd: str | Path | None = None) -> tuple[int, str]:
    """Run `cmd` in its own session; on timeout kill the whole group and fail with the output."""
    p = subprocess.Popen(cmd, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, cwd=cwd)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"{' '.join(cmd)} hung > {timeout}s:\n{out[-4000:]}")
    return p.returncode, out


def mpi_cmd(n: int, argv: list[str], timeout: float) -> tuple[list[str], dict[str, str]]:
    return ([mpiexec(), "-launcher", "fork", "-n", str(n), *argv],
            clean_env(MPIEXEC_TIMEOUT=str(int(timeout))))


def run_mpi_raw(n: int, argv: list[str], timeout: float = 60, cwd: str | Path | None = None,
                **env: str) -> tuple[int, str]:
    """`mpiexec -n n ARGV...`; returns (exit code, output)."""
    cmd, base_env = mpi_cmd(n, argv, timeout)
    base_env.update(env)
    return run_cmd(cmd, timeout + 15, base_env, cwd)


def ok_ranks(out: str) -> set[str]:
    # Hydra forwards each rank's output in chunks, so lines of different ranks can run together.
    return set(re.findall(r"MPIGNN-OK rank=(\d+)", out))


class _Pool:
    """A standing n-rank job (mpi_workers/pool.py) that runs worker scripts and CLI runs one after another, so
    the tests' small jobs do not each pay the ranks' imports of torch and torch-geometric."""

    def __init__(self, n: int, hosts: int = 0):
        """`hosts`: n ranks over that many emulated hosts (multihost-mpirun), whose process ids are their own: the
        ranks end when the queue folder is gone, not with a parent they cannot see."""
        import tempfile

        self.n, self.queue, self.next = n, Path(tempfile.mkdtemp(prefix=f"mpignn-pool{n}-")), 0
        argv = [sys.executable, str(WORKERS / "pool.py"), str(self.queue), str(0 if hosts else os.getpid())]
        if hosts:
            env = multihost_env()
            # bounded: should pytest die unseen, the hosts' ranks end with the tool's timeout
            cmd = [str(MULTIHOST), "-H", str(hosts), "-p", str(n // hosts), "-t", "3600", "--", *argv]
        else:
            cmd, env = mpi_cmd(n, argv, 24 * 3600)
        self.log = open(self.queue / "job.log", "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def submit(self, argv: list[str], cwd: str | Path | None, env: dict[str, str] | None = None) -> int:
        """Queue a run (`env`: variables set in the ranks for its duration); returns its number for `wait`."""
        import json

        k, self.next = self.next, self.next + 1
        tmp = self.queue / f"{k}.tmp"
        tmp.write_text(json.dumps({"argv": argv, "cwd": None if cwd is None else str(cwd), "env": env or {}}))
        tmp.rename(self.queue / f"{k}.json")
        for fd in self._wakes():  # the idle ranks (mpi_workers/pool.py); one not waiting yet finds the request
            self._wake(fd)
        return k

    def _wakes(self) -> list[int]:
        """Write ends of the ranks' wake pipes, of those made already."""
        fds = []
        for r in range(self.n):
            with contextlib.suppress(OSError):
                fds.append(os.open(self.queue / f"rank{r}.wake", os.O_WRONLY | os.O_NONBLOCK))
        return fds

    @staticmethod
    def _wake(fd: int) -> None:
        with contextlib.suppress(OSError):  # full of unread wakes (it is awake), or the rank ended meanwhile
            os.write(fd, b"!")
        os.close(fd)

    def output(self, k: int) -> str:
        """What run `k`'s ranks printed so far."""
        return "".join(p.read_text() for r in range(self.n) if (p := self.queue / f"{k}.rank{r}.log").exists())

    def pids(self) -> list[int]:
        """The ranks' process ids, in rank order (pool.py writes them before its first run)."""
        import time

        files = [self.queue / f"rank{r}.pid" for r in range(self.n)]
        while not all(p.exists() for p in files) and self.proc.poll() is None:
            time.sleep(0.02)
        return [int(p.read_text()) for p in files]

    def wait(self, k: int, timeout: float) -> tuple[list[int] | None, str]:
        """(each rank's exit code of run `k`, or None where the job ended or timed out first; the ranks' output)."""
        import time

        rcs = [self.queue / f"{k}.rank{r}.rc" for r in range(self.n)]
        deadline = time.monotonic() + timeout
        while not all(p.exists() for p in rcs) and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        out = self.output(k)
        if all(p.exists() for p in rcs):
            return [int(p.read_text()) for p in rcs], out
        state = "ended" if self.proc.poll() is not None else f"hung > {timeout}s"
        return None, f"{out}\n[the pooled job {state}]\n{(self.queue / 'job.log').read_text()[-4000:]}"

    def run(self, argv: list[str], timeout: float, cwd: str | Path | None) -> tuple[list[int] | None, str]:
        return self.wait(self.submit(argv, cwd), timeout)

    def close(self) -> None:
        wakes = self._wakes()
        shutil.rmtree(self.queue, ignore_errors=True)  # idle ranks see it gone and end: the launcher cleans up
        for fd in wakes:  # at once, not at their next check
            self._wake(fd)
        # a hung job: TERM lets multihost-mpirun remove its hosts. Ranks still finalising MPI when it does stay
        # stuck (their network is gone), and a loaded machine took over 5 s to end 4 ranks on 2 hosts: hence 30
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                self.proc.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, sig)
        self.proc.wait()
        self.log.close()


_POOLS: dict[tuple[int, int], _Pool] = {}  # (ranks, hosts: 0 for this host alone)
MULTIHOST = SHARED / "tools" / "multihost-mpirun"
FRESH = {"mpi_without_torch.py", "no_open_door.py", "device_identity.py", "device_collectives.py"}
"""Workers that check what a fresh process holds (modules imported, sockets, devices): never pooled."""
POOLED_CLIS = {"mpignn.train", "mpignn.predict", "mpignn.partition"}
"""The CLIs a pooled rank runs in-process (mpi_workers/cli_many.py's MAINS)."""


@atexit.register
def _close_pools() -> None:
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()


def run_python(n: int, argv: list[object], timeout: float = 60, cwd: str | Path | None = None, *, hosts: int = 0,
               **env: str) -> tuple[int, str]:
    """`mpiexec -n n python ARGV...` (a script and its arguments, or `-m` and a CLI); returns (exit code, output).
    Without extra environment it runs in the standing n-rank job (`_Pool`), unless the script is in FRESH;
    MPIGNN_TEST_POOL=0 starts a fresh job every time. The standing job is dropped (the next run starts another)
    after a run that did not end alike on every rank (`_keep_or_drop`). `hosts`:
    the n ranks spread over that many emulated hosts (multihost-mpirun), always in a standing job."""
    argv = [str(a) for a in argv]
    pooled = not env and os.environ.get("MPIGNN_TEST_POOL", "1") != "0" and (
        argv[1] in POOLED_CLIS if argv[0] == "-m" else Path(argv[0]).name not in FRESH)
    if not pooled and not hosts:
        return run_mpi_raw(n, [sys.executable, *argv], timeout, cwd, **env)
    pool = _pool(n, hosts)
    codes, out = pool.run(argv, timeout, cwd)
    _keep_or_drop(pool, argv, codes)
    return (-1 if codes is None else max(codes)), out


def _pool(n: int, hosts: int = 0) -> _Pool:
    key = (n, hosts)
    return _POOLS.get(key) or _POOLS.setdefault(key, _Pool(n, hosts))


def _keep_or_drop(pool: _Pool, argv: list[str], codes: list[int] | None) -> None:
    """Drop the standing job after a run that did not end alike on every rank: 0, or for a CLI an agreed
    refusal (1) or stop (75, SIGUSR2 or SIGTERM)."""
    if codes is None or (set(codes) != {0} and not (argv[0] == "-m" and len(set(codes)) == 1 and codes[0] in (1, 75))):
        pool.close()
        del _POOLS[next(key for key, value in _POOLS.items() if value is pool)]


class PooledRun:
    """A CLI run in the standing n-rank job, watched while it runs: for tests that signal a rank mid-run (the
    handlers are the run's own and put back after it, as `python -m mpignn.train` leaves them)."""

    def __init__(self, n: int, argv: list[object], cwd: str | Path | None = None, **env: str):
        self.argv = [str(a) for a in argv]
        self.pool = _pool(n)
        self.k = self.pool.submit(self.argv, cwd, env)
        self.pids = self.pool.pids()

    def output(self) -> str:
        return self.pool.output(self.k)

    def wait(self, timeout: float) -> tuple[int, str]:
        """(exit code: the ranks' highest, -1 if the job ended or hung; output)."""
        codes, out = self.pool.wait(self.k, timeout)
        _keep_or_drop(self.pool, self.argv, codes)
        return (-1 if codes is None else max(codes)), out


def run_cli_here(module: str, args: list[object], cwd: str | Path | None = None) -> tuple[int, str]:
    """`python -m MODULE ARGS` (`mpi_workers/cli_many.MAINS`) as its CLI runs it, in this process: one rank,
    where a failure returns 1 and nothing aborts. Returns (exit code, what it printed). A fresh interpreter
    would spend 3 CPU-s or more importing torch and torch-geometric first."""
    import contextlib
    import logging
    import tempfile

    from mpi_workers.cli_many import run_cli

    logger = logging.getLogger("mpignn")
    saved = list(logger.handlers), logger.level, logger.propagate, os.getcwd()
    with tempfile.TemporaryFile("w+") as log:
        try:
            os.chdir(cwd or saved[3])
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                code = run_cli(module, [str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            os.chdir(saved[3])
            logger.handlers[:], logger.propagate = saved[0], saved[2]
            logger.setLevel(saved[1])
        log.seek(0)
        return code, log.read()


def run_mpi(worker: str, n: int, *args: object, timeout: float = 60, **env: str) -> str:
    """Run tests/mpi_workers/WORKER on n ranks; require exit 0 and n distinct `MPIGNN-OK rank=` lines. Without
    extra environment it runs in the standing job of `run_python`."""
    rc, out = run_python(n, [WORKERS / worker, *args], timeout, **env)
    ok = ok_ranks(out)
    assert rc == 0 and len(ok) == n, f"rc={rc}, ok={sorted(ok)}\n{out[-4000:]}"
    return out


def run_cli_many(n: int, cases: dict[str, list[object]], out: Path, timeout: float = 300,
                 **env: str) -> dict[str, tuple[list[int], str]]:
    """Run several `python -m mpignn.train|predict|partition ARGS` ({name: [module, args...]}) one after
    another in one n-rank job (mpi_workers/cli_many.py: the ranks import torch once, not once a case); returns
    {name: (each rank's exit code, the ranks' logs of it joined, rank 0's first)}. A case that fails on some rank only
    ends the job (as it would alone): the cases it did not finish get exit codes -1 and the job's output."""
    import json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "cases.json"
    spec.write_text(json.dumps({name: [str(a) for a in argv] for name, argv in cases.items()}))
    rc, text = run_python(n, [WORKERS / "cli_many.py", spec, out], timeout, **env)
    results = {}
    for name in cases:
        logs = [out / f"{name}.rank{r}.log" for r in range(n)]
        codes = [out / f"{name}.rank{r}.rc" for r in range(n)]
        logged = "".join(p.read_text() for p in logs if p.exists())
        if all(p.exists() for p in codes):
            results[name] = ([int(p.read_text()) for p in codes], logged)
        else:  # -1: the job ended before this case did
            results[name] = ([-1] * n, f"case {name!r} did not finish (job rc={rc}):\n{text[-4000:]}\n{logged}")
    return results


def train_runs(n: int, base: Path, common: list[object], runs: dict[str, list[object]],
               timeout: float = 600) -> dict[str, tuple[list[int], str]]:
    """`run_cli_many` of `python -m mpignn.train COMMON --metrics-out BASE/NAME.jsonl EXTRA` for each
    {NAME: EXTRA} of `runs`; read a run back with `records`."""
    cases = {name: ["mpignn.train", *common, "--metrics-out", Path(base) / f"{name}.jsonl", *extra]
             for name, extra in runs.items()}
    return run_cli_many(n, cases, Path(base) / f"out-{n}-{'-'.join(runs)[:40]}", timeout)


def records(base: Path, results: dict[str, tuple[list[int], str]], name: str) -> tuple[list[dict], str]:
    """(the metrics records, the output) of `train_runs`' run NAME, which must have ended 0 on every rank."""
    import json

    codes, out = results[name]
    assert set(codes) == {0}, out[-4000:]
    return [json.loads(line) for line in (Path(base) / f"{name}.jsonl").read_text().splitlines()], out
