"""Shared pieces of the benchmarks: their parsers, locating a PyG reference interpreter and running it, running
ranks, printing tables."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from mpignn.env import mpiexec_path
from mpignn.errors import LaunchError, MpignnError

ROOT = Path(__file__).resolve().parents[2]
TEMP_ROOT = ("", "dataset root (default: a temporary folder)")  # a `bench_parser` flag: --root=TEMP_ROOT


def bench_parser(module: str, doc: str, **flags: Any) -> argparse.ArgumentParser:
    """Return the parser of `python -m MODULE` (described by the first paragraph of its docstring `doc`) with a
    `--flag-name` per keyword (its name with _ for -), typed as its default; a value is the default or (default,
    help text).
    """
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=" ".join(doc.split("\n\n")[0].split()))
    for name, value in flags.items():
        default, text = value if isinstance(value, tuple) else (value, None)
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default, help=text)
    return parser


def run_bench(main: Callable[[], int]) -> None:
    """End the process with `main`'s code; an MpignnError (no launcher, a bad flag value) is one line, exit 2."""
    from mpignn.mpi.run import exit_process  # here: the PyG reference's interpreter imports this module too

    try:
        code = main()
    except MpignnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    exit_process(code)


def pyg_backend() -> str:
    """Return the sampling backend PyG has in this interpreter: pyg-lib, torch-sparse, or "" (none, or no PyG)."""
    try:
        from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE
    except ImportError:
        return ""
    return "pyg-lib" if WITH_PYG_LIB else "torch-sparse" if WITH_TORCH_SPARSE else ""


def pyg_python(explicit: str | None) -> str | None:
    """Return the interpreter for PyG's numbers: --pyg-python, else this one if it has pyg-lib or torch-sparse,
    else None (the PyG column is skipped)."""
    return explicit or (sys.executable if pyg_backend() else None)


def run_json(cmd: list[str], *, env: dict[str, str] | None = None, pin=None, timeout: float = 3600,
             cwd: str | None = None) -> dict:
    """Run `cmd` (`pin`: its preexec function); return the JSON object on the last line of its stdout.

    A failed run raises RuntimeError with the command and the tail of its output.
    """
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=pin, timeout=timeout, cwd=cwd)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{(out.stdout + out.stderr)[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_reference(python: str, *args: str, timeout: float = 1800, threads: int = 0,
                  cwd: str | None = str(ROOT)) -> dict:
    """Run `python -m mpignn.bench._pyg_reference ARGS` (`threads`: bound to that many cores); return its row."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    pin = None
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
        pin = binding(mpiexec(), 1, threads)[1]
    return run_json([python, "-m", "mpignn.bench._pyg_reference", *args], env=env, pin=pin, timeout=timeout,
                    cwd=cwd)


def save_plot(path: str, figsize: tuple[float, float], draw: Any) -> None:
    """Save `draw(ax)` as the PNG `path` (legend lower right); without matplotlib, a note saying what to install."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: pip install matplotlib, or -e .[bench])")
        return
    fig, ax = plt.subplots(figsize=figsize)
    draw(ax)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot saved to {path}")


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Return rows of dicts as an aligned text table; columns are (key, header, format)."""
    cells = [[h for _, h, _ in columns]] + [["-" if row.get(k) is None else format(row[k], f) for k, _, f in columns]
                                            for row in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    lines = ["  ".join(c[i].rjust(widths[i]) if i else c[i].ljust(widths[i]) for i in range(len(columns)))
             for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_train(np_: int, args: list[str], timeout: float = 3600, *, cores_per_rank: int = 0,
              env: dict[str, str | None] | None = None, launcher: list[str] | None = None) -> list[dict]:
    """Run `mpiexec -n np_ python -m mpignn.train ARGS`; return the per-epoch records.

    `cores_per_rank`: confine each rank (`binding`), so a "1 thread" row really has one core. `env`: variables
    for the run (None: unset). `launcher`: starts the ranks instead (binds nothing); then the metrics file's
    temporary folder must be one rank 0's host sees.
    """
    start, pin = ([*launcher, sys.executable, "-m"], None) if launcher else mpi_command(np_, cores_per_rank)
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "metrics.jsonl"
        merged = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        merged = {k: v for k, v in merged.items() if v is not None}
        cmd = [*start, "mpignn.train", *args, "--metrics-out", str(metrics)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=merged, preexec_fn=pin)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
        return [json.loads(line) for line in metrics.read_text().splitlines()]


def mpi_command(ranks: int, cores: int) -> tuple[list[str], object]:
    """Return (`mpiexec [binding] -n ranks python -m`, preexec function): each rank confined to `cores` cores."""
    exe = mpiexec()
    launcher_args, pin = binding(exe, ranks, cores)
    return [exe, *launcher_args, "-n", str(ranks), sys.executable, "-m"], pin


def mpiexec() -> str:
    """Return `env.mpiexec_path()`; raise LaunchError naming the fix when there is none."""
    exe = mpiexec_path()
    if exe is None:
        raise LaunchError("expected mpiexec on PATH or beside this Python; found none. HINT: pip install mpich (or "
                          "load your site MPI)")
    return exe


def binding(exe: str, np_: int, cores: int) -> tuple[list[str], object]:
    """Return (launcher arguments, preexec function) that confine each rank to `cores` cores.

    One rank: an inherited affinity mask (any MPI). Several: MPICH's `-bind-to core:K`, Open MPI's
    `--bind-to core` (one core only); other launchers run unbound.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if cores <= 0 or cores * np_ > len(allowed):
        return [], None
    if np_ == 1:
        return [], lambda: os.sched_setaffinity(0, allowed[:cores])
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    if "HYDRA" in version:
        return ["-bind-to", f"core:{cores}"], None
    if "Open MPI" in version and cores == 1:
        return ["--bind-to", "core"], None
    return [], None
