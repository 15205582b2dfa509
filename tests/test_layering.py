"""The layering rules of STYLE.md §2, checked in fresh interpreters."""
import subprocess
import sys

import pytest

# mpi, env, log, config: stdlib (+ mpi4py/numpy for mpi); data .. exchange: numpy/numba/pymetis, no torch.
NO_TORCH = ["mpignn", "mpignn.mpi", "mpignn.env", "mpignn.log", "mpignn.config", "mpignn.errors", "mpignn.fileio",
            "mpignn.data", "mpignn.partition", "mpignn.sampling", "mpignn.sampling.access", "mpignn.exchange",
            "mpignn.watchdog", "mpignn.info", "mpignn.tensorboard_log", "mpignn.allocator"]
NO_PYG = ["mpignn.dist", "mpignn.mpi_store", "mpignn.checkpoint"]


def _loaded(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in " \
           "('torch', 'torch_geometric', 'mpi4py'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


@pytest.mark.parametrize("module", NO_TORCH)
def test_leaf_modules_import_without_torch(module):
    loaded = _loaded(module)
    assert "torch" not in loaded and "torch_geometric" not in loaded
    assert "mpi4py.MPI" not in loaded, "importing must not initialise MPI"


@pytest.mark.parametrize("module", NO_PYG)
def test_lower_layers_import_without_torch_geometric(module):
    assert "torch_geometric" not in _loaded(module)


def test_star_import_of_mpi_stays_free_of_torch():
    # `__all__` must not name the lazily imported torch helpers: `import *` resolves every name in it.
    code = ("from mpignn.mpi import *; import sys, mpignn.mpi as m; "
            "print(' '.join(sorted(x for x in sys.modules if x.split('.')[0] == 'torch'))); "
            "print(m.init_process_group.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.split("\n")[:2]
    assert first == "", "`from mpignn.mpi import *` imported torch"
    assert second == "mpignn.dist", "the lazy torch helpers must still be reachable as attributes"
