"""The wheel: `pip wheel --no-deps .` builds one holding every module of the tree (and nothing stale from an
earlier build), it installs without -e, and the README's quick start runs from it outside the source tree."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from _mpirun import ROOT, clean_env, mpiexec, run_cmd

pytestmark = [pytest.mark.slow, pytest.mark.mpi]


def _source_copy(dest: Path) -> Path:
    """The files git would package (tracked and new, not ignored) of setup.py, pyproject.toml, README.md and
    mpignn/: the build runs there, so the shared checkout's build/ is neither used nor touched."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "setup.py",
                             "pyproject.toml", "README.md", "mpignn"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=True).stdout.split()
    for rel in listed:
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


def test_wheel_installs_and_runs_outside_the_tree(tmp_path):
    pytest.importorskip("setuptools", reason="pip wheel --no-build-isolation needs setuptools in the venv")
    src = _source_copy(tmp_path / "src")
    stale = src / "build" / "lib" / "mpignn" / "removed_module.py"  # left by a build before the module went
    stale.parent.mkdir(parents=True)
    stale.write_text("raise ImportError('stale')\n")
    env = clean_env()
    rc, out = run_cmd([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w",
                       str(tmp_path / "dist"), "."], timeout=180, env=env, cwd=src)
    assert rc == 0, out[-3000:]
    (wheel,) = (tmp_path / "dist").glob("mpignn-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / "mpignn").rglob("*.py") if "__pycache__" not in p.parts}
    packaged = {n for n in names if n.startswith("mpignn/")}
    assert packaged == tree, f"missing {sorted(tree - packaged)}, extra {sorted(packaged - tree)}"
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "mpignn-train = mpignn.train:cli" in zipfile.ZipFile(wheel).read(entry).decode()

    site = tmp_path / "site"
    rc, out = run_cmd([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel)],
                      timeout=180, env=env)
    assert rc == 0, out[-3000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    shim = tmp_path / "shim"  # drops the editable install's finder, which would supply what the wheel lacks
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.meta_path[:] = [f for f in sys.meta_path if "
                                           "'editable' not in repr(f).lower()]\n")
    env = clean_env(PYTHONPATH=f"{shim}{os.pathsep}{site}")
    rc, out = run_cmd([sys.executable, "-c", "import mpignn; print(mpignn.__file__)"], 60, env, work)
    assert rc == 0 and Path(out.strip()).is_relative_to(site), out  # the wheel's copy, not the editable one
    for argv in (["-m", "mpignn.train", "--help"], ["-m", "mpignn.partition", "--help"], ["-m", "mpignn.info"]):
        rc, out = run_cmd([sys.executable, *argv], 120, env, work)
        assert rc == 0 and ("usage:" in out or "mpignn info" in out), (argv, out[-2000:])
    assert str(site / "mpignn") in out  # mpignn.info names where the package came from
    rc, out = run_cmd([str(site / "bin" / "mpignn-train"), "--help"], 60, env, work)
    assert rc == 0 and "usage:" in out, out[-2000:]
    rc, out = run_cmd([mpiexec(), "-launcher", "fork", "-n", "2", sys.executable, "-m", "mpignn.train",
                       "--epochs", "1", "--dataset", "synthetic:num_nodes=3000", "--root", str(tmp_path / "data")],
                      150, {**env, "MPIEXEC_TIMEOUT": "140"}, work)
    assert rc == 0 and "final test accuracy" in out and "(2 ranks)" in out, out[-3000:]
