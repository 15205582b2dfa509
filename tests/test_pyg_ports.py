"""PyG's example scripts ported to `mpignn.runtime` (examples/pyg_*.py) run on 1 and 2 ranks on Cora (IMDB for the
heterogeneous one, Amazon Photo for papers100m_gcn.py) and reach the accuracy the PyG originals reach in one
process (docs/from-pyg.md gives those figures and the command: examples/pyg_original.py)."""
from __future__ import annotations

import re
import shutil

import pytest

from _graphs import needs_cora
from _mpirun import ROOT, SHARED, run_python

pytestmark = [pytest.mark.mpi, needs_cora]

# The PyG originals on Cora in one process (torch-sparse 0.6.18, seeds 0-2, final test accuracy %, docs/from-pyg.md):
# reddit.py 78.9-79.4; distributed_sampling.py 78.6-79.2 on the test mask (drop_last=False: with PyG's drop_last=True
# Cora leaves no batch and the script stops). The reddit port is unseeded, as the original is; its own runs spread
# 77.5-80.6 on 1 and 2 ranks, so a port passes within 2.5 points of the originals' lowest.
# graph_sage_unsup.py (Cora, examples/pyg_original.py, seeds 0-2): test accuracy 60.2, 66.9, 58.1 at epoch 5 (65.8,
# 63.9, 66.0 at its 50); to_hetero_mag.py on IMDB: validation accuracy 57.50, 56.75, 55.25 at its epoch 20. The same
# 2.5 points under the lowest.
# multi_gpu/papers100m_gcn.py on Amazon Photo (examples/pyg_original.py on the CPU, seeds 0-2): test accuracy 89.99,
# 89.80, 90.65 after its 20 epochs. Its batch_size is per process: on 2 ranks the port takes --batch_size 512, so
# both sides take the same steps of the same 1,024 seeds (with 1,024 each, 2 ranks take half the steps).
FLOOR_UNSUP, FLOOR_HETERO, FLOOR_GCN = 55.6, 52.7, 87.3
FLOOR = {"pyg_reddit.py": 76.4, "pyg_distributed_sampling.py": 76.1, "pyg_graph_sage_unsup.py": FLOOR_UNSUP,
         "pyg_to_hetero_mag.py": FLOOR_HETERO, "pyg_papers100m_gcn.py": FLOOR_GCN}
ARGS = {"pyg_graph_sage_unsup.py": ["Cora", "5"]}  # 5 of the original's 50 epochs: its floor is at 5 too
RANK_ARGS = {("pyg_papers100m_gcn.py", 2): ["--batch_size", "512"]}


def _last_test_accuracy(out: str) -> float:
    """The last `Test: X` the script printed (the heterogeneous example prints only `Val: X`)."""
    found = re.findall(r"Test(?: Accuracy)?: ([0-9.]+)", out) or re.findall(r"Val: ([0-9.]+)", out)
    assert found, out[-3000:]
    value = float(found[-1])
    return value if value > 1.0 else 100.0 * value


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("ports")
    for name in ("Cora", "IMDB", "Photo"):
        shutil.copytree(SHARED / "datasets" / name, root / "data" / name)
    return root


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("script", sorted(FLOOR))
def test_ported_example_runs_and_reaches_the_originals_accuracy(workdir, script, ranks):
    args = [*ARGS.get(script, []), *RANK_ARGS.get((script, ranks), [])]
    rc, out = run_python(ranks, [str(ROOT / "examples" / script), *args], timeout=240, cwd=workdir)
    assert rc == 0, out[-3000:]
    assert _last_test_accuracy(out) >= FLOOR[script], out[-1500:]
    if script == "pyg_to_hetero_mag.py":  # PyG's Sequential imports its caller by name: the script ran twice
        assert out.count("Epoch: 20,") == ranks, out[-1500:]


@pytest.mark.parametrize("script", sorted(FLOOR))
def test_port_differs_from_pyg_in_at_most_15_marked_lines(script):
    """Every line the port changed or added carries the `# mpignn` mark (comment lines aside): at most 15."""
    code = [line for line in (ROOT / "examples" / script).read_text().splitlines() if not line.startswith("#")]
    assert 0 < sum(line.rstrip().endswith("# mpignn") or "# mpignn:" in line for line in code) <= 15
