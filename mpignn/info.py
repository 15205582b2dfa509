"""`python -m mpignn.info`: the versions and environment to paste into a bug report; under `mpirun -np N`
also one line per rank. Nothing here may stop the report: torch and the optional packages are imported inside
functions, each probe guarded.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import itertools
import os
import platform
import socket
import subprocess
import sys
from typing import Callable, Sequence

from mpignn.env import detect, mpiexec_path

__all__ = ["main", "versions", "devices", "backends", "launcher", "rank_line", "cores_text", "report_lines"]

MISSING = "not installed"
# Each distribution's metadata is read, its module is not imported ("mpich" is shown as the mpich wheel)
DISTRIBUTIONS = ("torch-geometric", "mpi4py", "mpich", "numba", "numpy", "pymetis", "kaminpar", "ogb", "tensorboard",
                 "intel-extension-for-pytorch", "oneccl-bindings-for-pytorch")
# Shown, never acted on: the variables that shape threads, devices, the network and the launcher. Prefixes,
# not everything, so that tokens and paths of unrelated tools stay out of a pasted report.
ENV_PREFIXES = ("MPIGNN_", "OMP_", "MKL_", "KMP_", "NUMBA_", "CUDA_VISIBLE", "CUDA_DEVICE", "NCCL_", "GLOO_",
                "TORCH_DISTRIBUTED", "TORCH_NCCL", "PYTORCH_CUDA_ALLOC", "ZE_", "ONEAPI_DEVICE", "CCL_", "FI_",
                "I_MPI_", "UCX_", "MPICH_", "MPIR_CVAR_", "OMPI_MCA_", "MASTER_ADDR", "MASTER_PORT",
                "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_NNODES", "SLURM_CPUS", "SLURM_GPUS", "SLURM_PROCID",
                "PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


def _safe(probe: Callable[[], str]) -> str:
    """The probe's answer; "not installed" for a missing module, else the error in one line."""
    try:
        return probe()
    except (ImportError, importlib.metadata.PackageNotFoundError):
        return MISSING
    except Exception as exc:  # a broken install must not hide the rest of the report
        return f"error: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _mpignn() -> str:
    import mpignn

    where = os.path.dirname(os.path.abspath(mpignn.__file__))
    text = f"{mpignn.__version__} ({where}"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10)
        if commit.returncode == 0 and commit.stdout.strip():
            dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no", "."],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            text += f", git {commit.stdout.strip()}{' with local changes' if dirty else ''}"
    return text + ")"


def _torch() -> str:
    import torch

    builds = [f"{name} {getattr(torch.version, name, None) or 'none'}" for name in ("cuda", "hip", "xpu")]
    return f"{torch.__version__} ({', '.join(builds)}; {torch.get_num_threads()} threads)"


def _mpi_library() -> str:
    from mpi4py import MPI

    lines = [" ".join(line.split()) for line in MPI.Get_library_version().splitlines() if line.strip()]
    major, minor = MPI.Get_version()
    return f"{lines[0] if lines else '?'} (MPI {major}.{minor})"


def versions() -> list[tuple[str, str]]:
    """Return (label, version) of mpignn, Python, the OS and every (optional) package mpignn uses."""
    rows = [("mpignn", _safe(_mpignn)),
            ("python", f"{platform.python_version()} ({platform.python_implementation()}) {sys.executable}"),
            ("os", _safe(lambda: f"{platform.platform()} ({platform.machine()})")), ("torch", _safe(_torch))]
    rows += [("mpich wheel" if name == "mpich" else name, _safe(lambda name=name: importlib.metadata.version(name)))
             for name in DISTRIBUTIONS]
    rows += [("mpi library", _safe(_mpi_library)), ("mpiexec", mpiexec_path() or "none found")]
    return rows


def devices() -> list[tuple[str, str]]:
    """Return ("devices", counts) and one row per CUDA/XPU device torch sees."""
    try:
        import torch
    except Exception:
        return [("devices", f"unknown (torch {MISSING})")]
    rows, counts = [], []
    for kind in ("cuda", "xpu"):
        mod = getattr(torch, kind, None)
        count = _safe(lambda mod=mod: str(mod.device_count() if mod is not None and mod.is_available() else 0))
        counts.append(f"{kind} {count}")
        for i in range(int(count) if count.isdigit() else 0):  # none where the count is an error
            rows.append((f"  {kind}:{i}", _safe(lambda mod=mod, i=i: str(mod.get_device_name(i)))))
    return [("devices", ", ".join(counts) + f"; cpus {os.cpu_count()}")] + rows


def backends() -> str:
    """Return which torch.distributed backends this torch build offers ("gloo yes, nccl no, ...")."""
    def probe() -> str:
        import torch.distributed as dist

        if not dist.is_available():
            return "torch.distributed is not available in this build"
        found = {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(), "mpi": dist.is_mpi_available(),
                 "xccl": bool(getattr(dist, "is_xccl_available", lambda: False)()),
                 "ccl": importlib.util.find_spec("oneccl_bindings_for_pytorch") is not None}
        return ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in found.items())

    return _safe(probe)


def launcher() -> str:
    """Return the launcher mpignn detects from the environment (`mpignn.env.detect`, which only reads)."""
    info = detect()
    return (f"{info.launcher} (rank {info.rank} of {info.world_size}, local {info.local_rank} of "
            f"{info.local_size}, host {info.host_rank} of {info.num_hosts})")


def cores_text(cores: set[int] | None = None) -> str:
    """Return the cores this process may run on, as ranges: "0-3,8"."""
    if cores is None:
        if not hasattr(os, "sched_getaffinity"):
            return "unknown (no sched_getaffinity here)"
        cores = os.sched_getaffinity(0)
    runs = [[c for _, c in run] for _, run in itertools.groupby(enumerate(sorted(cores)), lambda ic: ic[1] - ic[0])]
    return ",".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "none"


def _pick(local_rank: int, local_size: int) -> str:
    """What `--device auto --backend auto` would give this rank."""
    def probe() -> str:
        from mpignn.launch import process_group as dist

        choice = dist.choose("auto", "auto", dist.detect_hardware(), local_rank, local_size)
        return f"{choice.device} backend={choice.backend}"

    return _safe(probe)


def rank_line(rank: int, world_size: int, host: str, local_rank: int, local_size: int) -> str:
    """Return this rank's line: host, local rank, device and backend it would pick, bound cores."""
    return (f"rank {rank}/{world_size} host={host} local={local_rank}/{local_size} "
            f"device={_pick(local_rank, local_size)} cores={cores_text()}")


def report_lines(rank_lines: Sequence[str], mpi_problem: str = "") -> list[str]:
    """Return the whole report, rank 0's view, one "key: value" per line."""
    rows = versions() + devices() + [("backends", backends()), ("launcher", launcher())]
    if mpi_problem:
        rows.append(("mpi", f"unavailable ({mpi_problem}); single process"))
    rows += ([("env", f"{k}={v}") for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)]
             or [("env", "(none of the relevant variables set)")])
    width = max(len(k) for k, _ in rows)
    return ["mpignn info: paste everything below into a bug report", *(f"{k + ':':<{width + 1}} {v}" for k, v in rows),
            f"ranks: {len(rank_lines)}", *rank_lines]


def main(argv: Sequence[str] | None = None) -> int:
    """Collective over COMM_WORLD when MPI is up (one gather); print the report on rank 0. Returns 0."""
    argparse.ArgumentParser(prog="python -m mpignn.info", description=__doc__.splitlines()[0]).parse_args(argv)
    try:
        from mpignn.mpi import topology, world

        comm, problem = world(), ""
    except Exception as exc:
        comm, problem = None, f"{type(exc).__name__}: {exc}"
    if comm is None:
        everyone = [rank_line(0, 1, socket.gethostname(), 0, 1)]
    else:
        topo = topology(comm)
        mine = rank_line(topo.rank, topo.world_size, topo.host, topo.local_rank, topo.local_size)
        everyone = comm.gather(mine, root=0)  # None except on rank 0
    if everyone is not None:
        print("\n".join(report_lines(everyone, problem)), flush=True)
    return 0


if __name__ == "__main__":
    from mpignn.mpi.run import exit_process

    exit_process(main())
