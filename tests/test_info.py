"""`python -m mpignn.info`: the bug-report block (every key, on one process and under mpiexec -n 2, one line
per rank) and that a missing optional package (even torch) prints "not installed" instead of failing."""
import importlib.metadata
import os
import re
import subprocess
import sys

import pytest

from _mpirun import run_mpi_raw

KEYS = ("mpignn", "python", "os", "torch", "torch-geometric", "mpi4py", "numba", "numpy", "pymetis", "kaminpar",
        "ogb", "intel-extension-for-pytorch", "oneccl-bindings-for-pytorch", "mpi library", "devices", "backends",
        "launcher", "env")
RANK_LINE = re.compile(r"^rank (\d+)/(\d+) host=\S+ local=\d+/\d+ device=(\S+) backend=(\S+) cores=[\d,-]+$", re.M)


def _keys(out: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^([\w .-]+):\s+(.*)$", out, re.M)}


def test_one_process_prints_every_key(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mpignn.info"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "MPIGNN_LOG_LEVEL": "INFO",
                                           **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}})
    assert out.returncode == 0, out.stdout + out.stderr
    keys = _keys(out.stdout)
    assert set(KEYS) <= set(keys), sorted(set(KEYS) - set(keys))
    import torch

    assert keys["torch"].startswith(torch.__version__) and "cuda" in keys["torch"]
    assert keys["mpi library"].lower().startswith(("mpich", "open mpi", "intel")), keys["mpi library"]
    assert "gloo yes" in keys["backends"] and keys["launcher"].startswith("none")
    env_lines = re.findall(r"^env:\s+(\S+)$", out.stdout, re.M)
    assert "OMP_NUM_THREADS=1" in env_lines and "MPIGNN_LOG_LEVEL=INFO" in env_lines
    assert not any(line.startswith("PATH=") for line in env_lines)  # only the relevant variables
    assert [m[:2] for m in RANK_LINE.findall(out.stdout)] == [("0", "1")] and "ranks: 1" in out.stdout


def test_missing_optional_packages_print_not_installed(monkeypatch):
    from mpignn import info

    real = importlib.metadata.version

    def version(name):
        if name in ("kaminpar", "ogb"):
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)  # even without torch the report comes out

    for name in [m for m in sys.modules if m.startswith("mpignn.") and "torch" in vars(sys.modules[m])]:
        monkeypatch.delitem(sys.modules, name)  # modules imported by earlier tests hold torch already
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:  # or `from mpignn.launch import process_group` finds the old module
            monkeypatch.delattr(sys.modules[parent], child, raising=False)
    lines = info.report_lines([info.rank_line(0, 1, "h", 0, 1)])
    keys = _keys("\n".join(lines))
    assert keys["kaminpar"] == keys["ogb"] == keys["torch"] == keys["backends"] == "not installed"
    assert keys["devices"].startswith("unknown") and keys["numpy"] == real("numpy")
    assert RANK_LINE.match(lines[-1]) is None and "device=not installed" in lines[-1]


def test_cores_as_ranges():
    from mpignn.info import cores_text

    assert cores_text({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11" and cores_text({5}) == "5"


@pytest.mark.mpi
def test_two_ranks_print_one_line_each(tmp_path):
    rc, out = run_mpi_raw(2, [sys.executable, "-m", "mpignn.info"], timeout=90, cwd=tmp_path)
    assert rc == 0, out[-3000:]
    assert out.count("mpignn info:") == 1  # rank 0 prints the report, once
    ranks = RANK_LINE.findall(out)
    assert sorted(r[:2] for r in ranks) == [("0", "2"), ("1", "2")], out[-3000:]
    assert all(device == "cpu" and backend == "gloo" for _, _, device, backend in ranks) or \
        all(device.startswith(("cuda", "xpu")) for _, _, device, _ in ranks)
    assert "ranks: 2" in out and re.search(r"^launcher:\s+mpich \(rank 0 of 2", out, re.M), out[-3000:]
