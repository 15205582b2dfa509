"""Python 3.10 (README and python_requires say 3.10+): the torch-free modules import there and `--config` TOML
files parse (through tomli, which setup.py installs on 3.10 only; the first test skips when no 3.10 interpreter
is found), and the wheel metadata setuptools builds says so to pip."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from _mpirun import ROOT

TORCH_FREE = ["mpignn.config.train_config", "mpignn.mpi", "mpignn.env", "mpignn.log", "mpignn.errors"]

_CHECK = textwrap.dedent("""
    import sys
    assert sys.version_info[:2] == (3, 10), sys.version
    import {modules}
    from mpignn.config.train_config import TrainConfig, build_parser
    from mpignn.errors import ConfigError
    parse = lambda argv: TrainConfig.from_args(build_parser().parse_args(argv))  # tests/_config.py's
    cfg = parse(["--config", sys.argv[1], "--epochs", "3"])
    assert (cfg.hidden, cfg.fanouts, cfg.epochs) == (32, [5, 4], 3), cfg
    try:
        parse(["--config", sys.argv[2]])
        raise SystemExit("a broken TOML file was accepted")
    except ConfigError as exc:
        assert "cannot read --config" in str(exc), exc
    assert not any(m.split(".")[0] == "torch" for m in sys.modules), "torch was imported"
    print("PY310-OK", "tomllib" in sys.modules, "tomli" in sys.modules)
""").format(modules=", ".join(TORCH_FREE))


def _python310() -> tuple[str, dict[str, str]] | None:
    """A runnable 3.10 interpreter (on PATH, else one pyenv knows) and the environment that selects it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    candidates = [shutil.which("python3.10")]
    pyenv = shutil.which("pyenv")
    if pyenv:
        bare = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True, timeout=30).stdout
        for version in (v.strip() for v in bare.splitlines()):
            if version.startswith("3.10"):
                prefix = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True, timeout=30)
                candidates.append(os.path.join(prefix.stdout.strip(), "bin", "python"))
                env["PYENV_VERSION"] = version
                break
    for exe in filter(None, candidates):
        probe = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2] == (3, 10))"],
                               capture_output=True, text=True, env=env, timeout=30)
        if probe.stdout.strip() == "True":
            return exe, env
    return None


def test_torch_free_modules_and_config_files_on_python_310(tmp_path):
    found = _python310()
    if found is None:
        pytest.skip("no Python 3.10 interpreter (python3.10 on PATH or a pyenv 3.10.x)")
    exe, env = found
    site = tmp_path / "site"  # what setup.py installs there for these modules: tomli (3.10 only) and numpy
    pip = subprocess.run([exe, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
                          "--target", str(site), "tomli>=1.1", "numpy>=1.24"],
                         capture_output=True, text=True, env=env, timeout=300)
    if pip.returncode != 0:
        pytest.skip(f"could not install tomli/numpy for Python 3.10 (no package index?): {pip.stderr[-300:]}")
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text('hidden = 32\nfanout = "5,4"\nepochs = 1\n')
    bad.write_text("hidden = = 32\n")
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{site}"
    out = subprocess.run([exe, "-c", _CHECK, str(good), str(bad)], capture_output=True, text=True, env=env,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and "PY310-OK False True" in out.stdout, out.stdout + out.stderr


def test_built_metadata_requires_310_and_tomli_on_310_only(tmp_path):
    """What pip reads: the wheel metadata setuptools builds from a copy of the tree (the checkout is not touched)."""
    from email.parser import Parser

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    src, out = tmp_path / "src", tmp_path / "out"
    for name in ("setup.py", "pyproject.toml", "README.md"):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "mpignn", src / "mpignn", ignore=shutil.ignore_patterns("__pycache__", "*.nb?"))
    out.mkdir()
    built = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                            "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))", str(out)],
                           capture_output=True, text=True, timeout=120, cwd=src)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    meta = Parser().parsestr((out / built.stdout.split()[-1] / "METADATA").read_text())
    python = SpecifierSet(meta["Requires-Python"])
    assert "3.10.0" in python and "3.9.18" not in python, python
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    (tomli,) = [r for r in requires if r.name == "tomli"]
    assert tomli.marker.evaluate({"python_version": "3.10"}) and not tomli.marker.evaluate({"python_version": "3.11"})
    assert "1.1" in tomli.specifier and "1.0" not in tomli.specifier
