"""Nothing lost, nothing silent (issue 42, item 6), Tier 1: every config value is checked for its type (TOML
and flags alike, booleans strictly) and its range before anything is loaded; the model and one step that
cannot fit in memory are refused up front (`config.train_config.check_fits`); numba's cache falls back to a
per-user temporary folder where none of its own is writable (`compiled.ensure_numba_cache_dir`)."""
import dataclasses
import logging
import os
import re
import subprocess
import sys
import textwrap

import pytest

from _config import parse
from _mpirun import ROOT
from mpignn import compiled, env
from mpignn.config.train_config import TrainConfig, build_parser, check_fits
from mpignn.config.values import check_memory, estimate_step_bytes
from mpignn.errors import ConfigError, LaunchError

GIB = 2 ** 30


def _toml(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text + "\n")
    return ["--config", str(path)]


def _one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg and "HINT:" in msg, msg
    return msg


# ---- a: types, against each field's annotation, before anything else

@pytest.mark.parametrize("line, key, expected", [
    ("hidden = 64.5", "hidden", "an int"),  # used to reach torch: "empty() takes 1 positional argument"
    ('epochs = "5"', "epochs", "an int"),  # used to be a TypeError in __post_init__
    ("epochs = 5.0", "epochs", "an int"),
    ("seed = true", "seed", "an int"),  # a bool is no int
    ('lr = "0.1"', "lr", "a number"),
    ("dataset = 5", "dataset", "a string"),
    ('fanout = ["15"]', "fanout", "a string"),
    ("cache_size = 1.5", "cache_size", "an int or a string"),
])
def test_a_wrong_toml_type_is_one_line_naming_key_type_and_value(tmp_path, line, key, expected):
    with pytest.raises(ConfigError) as err:
        parse(_toml(tmp_path, line))
    msg = _one_line(err.value)
    value = line.split(" = ", 1)[1]
    shown = {"true": "True"}.get(value, value.replace('"', "'"))
    assert f"config key {key} (--{key.replace('_', '-')}) expected {expected}; got {shown}" in msg, msg


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "run.toml"
    path.write_bytes(b"hidden = 64\n# caf\xe9\n")  # Latin-1, as an old editor saves it
    with pytest.raises(ConfigError) as err:
        parse(["--config", str(path)])
    msg = _one_line(err.value)
    assert msg.startswith(f"cannot read --config {path}: 'utf-8' codec can't decode byte 0xe9") and \
        msg.endswith("HINT: a TOML file of key = value, saved as UTF-8"), msg


def test_every_field_is_type_checked(tmp_path):
    """A TOML array of text fits no annotation: each field refuses it by name (no TypeError, nothing accepted)."""
    parser = build_parser()
    for f in dataclasses.fields(TrainConfig):
        with pytest.raises(ConfigError, match=f"config key {f.name} ") as err:
            TrainConfig.from_args(parser.parse_args(_toml(tmp_path, f'{f.name} = ["1"]')))
        _one_line(err.value)


def test_fanouts_take_toml_arrays_and_tables(tmp_path):
    """As the Python API takes them (a list, a dict per edge type), stored as the flags' text."""
    cfg = parse(_toml(tmp_path, 'fanout = [15, 10]\n[edge_fanout]\na__to__b = [5, 5]'))
    assert (cfg.fanout, cfg.edge_fanout, cfg.edge_fanouts) == ("15,10", "a__to__b=5,5", {"a__to__b": [5, 5]})


def test_the_python_api_is_checked_alike():
    with pytest.raises(ConfigError, match=r"config key hidden \(--hidden\) expected an int; got 64.5 \(float\)"):
        TrainConfig(hidden=64.5)


def test_float_fields_take_toml_ints_as_floats(tmp_path):
    cfg = parse(_toml(tmp_path, "lr = 1\nprep_timeout = 60\ndropout = 0"))
    assert (cfg.lr, cfg.prep_timeout, cfg.dropout) == (1.0, 60.0, 0.0)
    assert all(isinstance(v, float) for v in (cfg.lr, cfg.prep_timeout, cfg.dropout))
    assert parse(_toml(tmp_path, 'cache_size = 123')).cache_size == 123
    assert parse(_toml(tmp_path, 'cache_size = "auto"')).cache_size == "auto"


# ---- b: booleans are TOML booleans

def test_a_quoted_false_is_refused_not_read_as_true(tmp_path):
    with pytest.raises(ConfigError) as err:  # "false" used to be truthy: a resumed run
        parse(_toml(tmp_path, 'resume = "false"\ncheckpoint_dir = "ck"'))
    msg = _one_line(err.value)
    assert "config key resume (--resume) expected a TOML boolean (true or false); got 'false' (str)" in msg
    assert "resume = false (no quotes)" in msg
    for line in ("replicated = 1", 'force = "yes"', "local_prep = 0"):
        with pytest.raises(ConfigError, match="expected a TOML boolean"):
            parse(_toml(tmp_path, line))


def test_real_booleans_and_flags_are_taken(tmp_path):
    assert parse(_toml(tmp_path, 'resume = false\ncheckpoint_dir = "ck"')).resume is False
    assert parse(_toml(tmp_path, 'resume = true\ncheckpoint_dir = "ck"')).resume is True
    assert parse(["--local-prep"]).local_prep is True


# ---- c: ranges, table-driven (config.values.RANGES)

@pytest.mark.parametrize("argv, flag", [
    (["--dropout", "1.5"], "--dropout"),
    (["--dropout", "1"], "--dropout"),
    (["--dropout", "-0.1"], "--dropout"),
    (["--dropout", "nan"], "--dropout"),
    (["--weight-decay", "-1"], "--weight-decay"),
    (["--weight-decay", "inf"], "--weight-decay"),
    (["--lr", "inf"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--embed-lr", "inf"], "--embed-lr"),
    (["--embed-lr", "nan"], "--embed-lr"),
    (["--prep-timeout", "-1"], "--prep-timeout"),
    (["--prep-timeout", "nan"], "--prep-timeout"),
    (["--prep-timeout", "inf"], "--prep-timeout"),
    (["--collective-timeout", "nan"], "--collective-timeout"),
    (["--collective-timeout", "-5"], "--collective-timeout"),
    (["--warmup-epochs", "nan"], "--warmup-epochs"),
    (["--warmup-epochs", "inf"], "--warmup-epochs"),
    (["--link-val", "inf"], "--link-val"),
    (["--link-test", "nan"], "--link-test"),
    (["--seed", "-1"], "--seed"),
])
def test_an_out_of_range_value_is_one_line_with_its_flag(argv, flag):
    with pytest.raises(ConfigError) as err:
        parse(argv)
    msg = _one_line(err.value)
    assert "; got " in msg and flag in msg.split("; got ")[0], msg


def test_out_of_range_toml_values_are_refused_alike(tmp_path):
    with pytest.raises(ConfigError, match=r"--dropout must be a probability in \[0, 1\); got 1.5\. HINT"):
        parse(_toml(tmp_path, "dropout = 1.5"))
    with pytest.raises(ConfigError, match=r"--weight-decay must be a finite number >= 0; got -1.0\. HINT"):
        parse(_toml(tmp_path, "weight_decay = -1"))
    with pytest.raises(ConfigError, match=r"--prep-timeout must be positive seconds; got nan\. HINT"):
        parse(_toml(tmp_path, "prep_timeout = nan"))


def test_the_edges_of_each_range_are_accepted():
    cfg = parse(["--dropout", "0", "--weight-decay", "0", "--lr", "1e-9", "--prep-timeout", "0.5",
                 "--warmup-epochs", "0", "--seed", str(2 ** 63 - 1), "--embed-lr", "10", "--target-val", "1"])
    assert (cfg.dropout, cfg.weight_decay, cfg.seed) == (0.0, 0.0, 2 ** 63 - 1)
    assert parse(["--dropout", "0.999"]).dropout == 0.999


# ---- d: the model and one step, estimated before anything is loaded

def test_the_estimate_is_the_documented_formula():
    # sage, 3 layers, node task: one hidden x hidden layer of 2 matrices, 2 hidden-wide outputs
    assert estimate_step_bytes(100, 3, 10) == 16 * 2 * 1 * 100 ** 2 + 8 * 2 * 100 * 10
    # gcn: 1 matrix a layer; link: the last layer is hidden wide too, and the MLP decoder adds one
    assert estimate_step_bytes(100, 3, 10, model="gcn", task="link", decoder="mlp") == \
        16 * (1 * 2 + 1) * 100 ** 2 + 8 * 3 * 100 * 10
    # 2 layers, node task: no hidden x hidden matrix (the widths of the features and classes are unknown)
    assert estimate_step_bytes(100, 2, 10) == 8 * 1 * 100 * 10


def test_hidden_100000_is_refused_up_front_with_the_estimate():
    """`--hidden 100000` used to fail in torch's allocator; now one line: the estimate, what is free, a HINT."""
    with pytest.raises(ConfigError) as err:
        check_fits(parse(["--hidden", "100000", "--epochs", "1"]), world_size=1, ranks_on_host=1,
                   available=64 * GIB)
    msg = _one_line(err.value)
    assert "estimate of at least 299.5 GiB" in msg and "64.0 GiB is available" in msg, msg
    assert "--hidden 100000" in msg and "HINT: a smaller --hidden or --batch-size" in msg, msg


def test_what_can_fit_is_not_refused():
    small = 4 * GIB  # a laptop's spare memory
    assert check_fits(parse([]), world_size=1, ranks_on_host=1, available=small) < 16 * 2 ** 20
    # a small graph with a big batch and wide fanouts: the product of the fanouts is not counted
    cfg = parse(["--batch-size", "2708", "--fanout", "25,25,25", "--hidden", "2048"])
    assert check_fits(cfg, world_size=1, ranks_on_host=1, available=small) < GIB
    for over in (["--task", "link"], ["--model", "gat"], ["--model", "gcn"]):
        check_fits(parse(over), world_size=1, ranks_on_host=1, available=small)


def test_ranks_share_the_host_and_a_global_batch_is_split():
    cfg = parse(["--hidden", "1000", "--batch-size", "8000"])
    one = check_fits(cfg, world_size=1, ranks_on_host=1, available=None)
    assert one == estimate_step_bytes(1000, 3, 8000)
    assert check_fits(cfg, world_size=8, ranks_on_host=8, available=None) == 8 * estimate_step_bytes(1000, 3, 1000)
    per_rank = parse(["--hidden", "1000", "--batch-size", "8000", "--batch-scope", "rank"])
    assert check_fits(per_rank, world_size=8, ranks_on_host=4, available=None) == 4 * one
    with pytest.raises(ConfigError, match="4 rank\\(s\\) on this host"):
        check_fits(per_rank, world_size=8, ranks_on_host=4, available=one)


def test_unknown_memory_refuses_nothing_and_the_default_reads_the_host(monkeypatch):
    monkeypatch.setattr(env, "mem_available_bytes", lambda: None)
    check_fits(parse(["--hidden", "100000"]), world_size=1, ranks_on_host=1)
    monkeypatch.setattr(env, "mem_available_bytes", lambda: GIB)
    with pytest.raises(ConfigError, match="where 1.0 GiB is available"):
        check_fits(parse(["--hidden", "100000"]))
    check_memory(10, None, "x")


def test_check_fits_imports_no_torch():
    code = ("import sys; from mpignn.config.train_config import TrainConfig, build_parser, check_fits; "
            "check_fits(TrainConfig.from_args(build_parser().parse_args([])), available=1 << 40); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stdout + out.stderr


# ---- e: numba's on-disk cache where no folder of its own is writable

def _blocked(tmp_path):
    """A package folder whose __pycache__ is a file, and a user cache folder under a file: neither can be
    made (root included, which writes into read-only folders)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__pycache__").write_text("a file where the folder should be")
    (tmp_path / "home-file").write_text("")
    return str(pkg), str(tmp_path / "home-file" / ".cache" / "numba")


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def numba_log():
    handler = _Lines()
    logger = logging.getLogger("mpignn.compiled")
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def test_no_writable_numba_folder_falls_back_to_a_private_temp_folder(tmp_path, numba_log):
    pkg, user = _blocked(tmp_path)
    environ: dict[str, str] = {}
    got = compiled.ensure_numba_cache_dir(pkg, environ, temp_dir=str(tmp_path / "tmp"), user_dir=user)
    want = str(tmp_path / "tmp" / f"mpignn-numba-{os.getuid()}")
    assert got == want and environ == {"NUMBA_CACHE_DIR": want}
    assert os.path.isdir(want) and os.stat(want).st_mode & 0o777 == 0o700
    assert len(numba_log) == 1 and f"NUMBA_CACHE_DIR={want}" in numba_log[0], numba_log


def test_an_unwritable_numba_cache_dir_is_replaced_and_said(tmp_path, numba_log):
    pkg, user = _blocked(tmp_path)
    environ = {"NUMBA_CACHE_DIR": str(tmp_path / "home-file" / "nc")}
    got = compiled.ensure_numba_cache_dir(pkg, environ, temp_dir=str(tmp_path / "tmp"), user_dir=user)
    assert environ["NUMBA_CACHE_DIR"] == got and "home-file/nc: not writable" in numba_log[0], numba_log


def test_a_writable_numba_folder_changes_nothing(tmp_path, numba_log):
    pkg, user = _blocked(tmp_path)
    (tmp_path / "ok").mkdir()
    environ = {"NUMBA_CACHE_DIR": str(tmp_path / "ok")}
    assert compiled.ensure_numba_cache_dir(pkg, environ, temp_dir=str(tmp_path / "tmp"), user_dir=user) is None
    assert environ == {"NUMBA_CACHE_DIR": str(tmp_path / "ok")} and numba_log == []
    assert compiled.ensure_numba_cache_dir(str(tmp_path), {}, user_dir=user) is None  # its __pycache__ can be made
    assert compiled.ensure_numba_cache_dir(pkg, {}, user_dir=str(tmp_path / "ok")) is None  # numba's user folder


def test_no_writable_folder_at_all_says_how_to_set_numba_cache_dir(tmp_path):
    pkg, user = _blocked(tmp_path)
    with pytest.raises(LaunchError) as err:
        compiled.ensure_numba_cache_dir(pkg, {}, temp_dir=str(tmp_path / "home-file"), user_dir=user)
    assert "HINT: export NUMBA_CACHE_DIR=" in _one_line(err.value)


def test_a_temp_folder_that_is_not_ours_is_not_used(tmp_path):
    """A link planted in a shared temporary folder (or a folder of another user) is refused, not written."""
    pkg, user = _blocked(tmp_path)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "tmp" / f"mpignn-numba-{os.getuid()}")
    with pytest.raises(LaunchError, match="NUMBA_CACHE_DIR"):
        compiled.ensure_numba_cache_dir(pkg, {}, temp_dir=str(tmp_path / "tmp"), user_dir=user)
    assert list((tmp_path / "elsewhere").iterdir()) == []


_READ_ONLY_INSTALL = textwrap.dedent("""
    import os, sys, tempfile
    allowed = sys.argv[1]
    real = tempfile.TemporaryFile
    def refuse(*args, dir=None, **kwargs):  # a read-only file system everywhere but the temporary folder
        if dir is not None and not os.path.abspath(dir).startswith(allowed):
            raise PermissionError(30, "Read-only file system", dir)
        return real(*args, dir=dir, **kwargs)
    tempfile.TemporaryFile = refuse
    from mpignn.sampling import kernels
    print(kernels.mix_seed(1, 2))
    print("CACHE", os.environ.get("NUMBA_CACHE_DIR"))
""")


def test_a_read_only_install_without_a_writable_home_still_imports_the_kernels(tmp_path):
    """Used to fail at import: numba's "cannot cache function 'mix_seed': no locator available"."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    environ.update(TMPDIR=str(tmp), HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "home" / ".cache"),
                   PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _READ_ONLY_INSTALL, str(tmp)], capture_output=True, text=True,
                         env=environ, timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    folder = tmp / f"mpignn-numba-{os.getuid()}"
    assert f"CACHE {folder}" in out.stdout and "numba's cache folders are not writable" in out.stderr, out
    assert any(p.suffix == ".nbi" for p in folder.rglob("*")), sorted(folder.rglob("*"))  # numba cached there


_PACKAGE = ROOT / "mpignn"
# These define cached kernels too and are imported before sampling.kernels (mpignn.data imports data.graph), so
# a read-only install still fails there until each calls compiled.ensure_numba_cache_dir first.
_NOT_YET: set[str] = set()


@pytest.mark.parametrize("path", [
    pytest.param(rel, marks=pytest.mark.xfail(strict=True, reason="add the ensure_numba_cache_dir line"))
    if rel in _NOT_YET else rel
    for rel in sorted(str(p.relative_to(ROOT)) for p in _PACKAGE.rglob("*.py") if "cache=True" in p.read_text()
                      and p.name != "compiled.py")])
def test_every_module_with_cached_kernels_finds_a_writable_cache_first(path):
    text = (ROOT / path).read_text()
    call = text.find("\nensure_numba_cache_dir(")
    first = re.search(r"cache=True[,)]", text).start()
    assert 0 <= call < first, f"{path}: call compiled.ensure_numba_cache_dir before its first @njit(cache=True)"


def test_the_training_cli_refuses_a_model_that_cannot_fit_before_any_data(tmp_path):
    """`python -m mpignn.train --hidden 100000`: one line with the estimate, exit 1, nothing prepared."""
    from _mpirun import run_cli_here

    code, out = run_cli_here("mpignn.train", ["--hidden", "100000", "--epochs", "1", "--root", tmp_path,
                                              "--dataset", "synthetic:num_nodes=2000"])
    assert code == 1 and "expected the model and one training step to fit" in out, out[-2000:]
    assert "Traceback" not in out and not (tmp_path / "mpignn-parts").exists()
