"""Bad input: one line naming the problem and the fix, on every rank, non-zero exit, no traceback."""
import re
import shutil

import numpy as np
import pytest

from _mpirun import run_cli_many, run_python

pytestmark = pytest.mark.mpi

SMALL = "synthetic:num_nodes=2000,avg_degree=6,num_features=4"


def _train(n, root, *args, timeout=90):
    return run_python(n, ["-m", "mpignn.train", "--root", str(root), "--epochs", "1", *args],
                      timeout=timeout)


def _assert_clean_failure(rc, out, needle, n):
    assert rc != 0, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    # Hydra forwards each rank's output in chunks, so one rank's line can run into another's.
    messages = re.split(r"(?=mpignn: error: \[rank \d+\])", out)
    ranks = {m.split("]")[0].split()[-1] for m in messages if m.startswith("mpignn: error: [rank")}
    assert ranks == {str(r) for r in range(n)}, out[-3000:]  # every rank says it
    failing = [m.splitlines()[0] for m in messages if m.startswith("mpignn: error:")]
    assert all(needle in m and "HINT" in m for m in failing), failing


def _bad_npz(path, **override):
    rng = np.random.default_rng(0)
    arrays = {"edge_index": rng.integers(0, 50, size=(2, 200)), "x": rng.normal(size=(50, 3)).astype(np.float32),
              "y": rng.integers(0, 2, 50), "train_idx": np.arange(20), "val_idx": np.arange(20, 30),
              "test_idx": np.arange(30, 50)}
    arrays.update(override)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return f"npz:{path}"


@pytest.mark.parametrize("args,needle", [
    (["--dataset", "ogbn-nope"], "unknown dataset"),
    (["--fanout", "10,0"], "--fanout must list"),
    (["--batch-size", "0"], "--batch-size must be a positive int"),
    (["--dataset", "synthetic:num_nodes=inf"], "synthetic option num_nodes needs a finite number"),
])
def test_bad_flags_fail_before_torch_is_imported(tmp_path, args, needle):
    rc, out = _train(2, tmp_path, *args)
    _assert_clean_failure(rc, out, needle, 2)


LATER = {  # refused after torch is imported: run as cases of one job per world size (`refused` below)
    "cora": (2, ["--dataset", "Cora"], "Cora is not under"),
    "cuda": (2, ["--device", "cuda"], "no CUDA device"),
    "nccl": (2, ["--backend", "nccl"], "nccl is not available"),
    "parts": (3, ["--dataset", "synthetic:num_nodes=2,avg_degree=1"],  # a 2-node graph cut into 3 parts
              "--num-parts must be between 1 and the node count"),
}


@pytest.mark.parametrize("name", list(LATER))
def test_bad_flags_and_datasets(refused, name):
    n, _, needle = LATER[name]
    _assert_refused(refused[name], needle, n)


MALFORMED = [
    ({"y": None}, "missing key(s) y"),
    ({"x": np.zeros((50, 3), dtype=np.int32)}, "x must be a float"),
    ({"edge_index": np.array([[0, 1], [1, 70]])}, "outside [0, 50)"),
    ({"x": np.full((50, 3), np.nan, dtype=np.float32)}, "NaN"),
    ({"train_idx": np.array([], dtype=np.int64)}, "train_idx is empty"),
    ({"train_idx": np.array([0, 1, 2, 1])}, "train_idx must list each node once"),  # was a mid-training traceback
    ({"val_idx": np.arange(15, 30)}, "train_idx and val_idx share 5 node(s)"),
    ({"num_classes": np.int64(10**12)}, "num_classes must be between 2 and the node count 50"),
]


@pytest.mark.parametrize("override,needle", MALFORMED)
def test_malformed_npz_message(tmp_path, override, needle):
    """Each malformed file's one-line error with a HINT (in process: every rank runs this same check)."""
    from mpignn.data import load_dataset
    from mpignn.errors import DatasetError

    with pytest.raises(DatasetError) as err:
        load_dataset(_bad_npz(tmp_path / "g.npz", **override))
    assert needle in str(err.value) and "HINT" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("case", [0, 5])  # a header check, a data check
def test_malformed_npz_fails_on_every_rank(refused, case):
    _assert_refused(refused[f"malformed-{case}"], MALFORMED[case][1], 2)


def test_partition_folder_mismatches(refused):
    _assert_refused(refused["parts-vs-ranks"], "has 3 parts but the job has 2 ranks", 2)
    _assert_refused(refused["parts-vs-dataset"], "was made for dataset", 3)
    # one part truncated, another missing: every rank fails with the first rank's problem
    codes, out = refused["parts-broken"]
    _assert_refused((codes, out), "part-001/", 3)
    assert "missing" in out


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """{name: (each rank's exit code, output)} of runs each refused on every rank alike, one job per world size
    (`run_cli_many`: each run through `run_main`, as `python -m mpignn.train`)."""
    from mpignn.data import load_dataset
    from mpignn.partition import partition_graph

    base = tmp_path_factory.mktemp("refused")
    partition_graph(load_dataset(SMALL), 3, base / "p3", method="random", dataset=SMALL)
    shutil.copytree(base / "p3", base / "p3-broken")
    col = base / "p3-broken" / "part-002" / "col.npy"
    col.write_bytes(col.read_bytes()[:-16])
    shutil.rmtree(base / "p3-broken" / "part-001")
    cases = {name: (n, args) for name, (n, args, _) in LATER.items()}
    for i in (0, 5):
        cases[f"malformed-{i}"] = (2, ["--dataset", _bad_npz(base / f"bad{i}.npz", **MALFORMED[i][0])])
    cases["parts-vs-ranks"] = (2, ["--dataset", SMALL, "--partitions", base / "p3"])
    cases["parts-vs-dataset"] = (3, ["--dataset", "synthetic", "--partitions", base / "p3"])
    cases["parts-broken"] = (3, ["--dataset", SMALL, "--partitions", base / "p3-broken"])
    results = {}
    for n in (2, 3):
        results.update(run_cli_many(n, {name: ["mpignn.train", "--root", base, "--epochs", "1", *args]
                                        for name, (k, args) in cases.items() if k == n}, base / f"out{n}"))
    return results


def _assert_refused(result, needle, n):
    """`_assert_clean_failure` of a `run_cli_many` run: it failed where no rank's run returned 0."""
    codes, out = result
    _assert_clean_failure(0 if 0 in codes else 1, out, needle, n)
