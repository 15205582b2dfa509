import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402

from mpignn.launch.allocator import prefer_huge_pages  # noqa: E402

prefer_huge_pages()  # as `python -m mpignn.train` does, before torch's first allocation; the suite's jobs inherit it


@pytest.fixture(scope="session", autouse=True)
def _standing_jobs():
    """End the standing MPI jobs (tests/_mpirun.py) with the session: xdist's workers may exit without running
    atexit, and the ranks on emulated hosts cannot see that pytest is gone."""
    yield
    from _mpirun import _close_pools

    _close_pools()


@pytest.fixture(scope="module")
def rt():
    """A one-process Runtime (MPICH singleton) for the Python API's in-process tests."""
    from mpignn import runtime

    return runtime.bootstrap(logging_setup=False)


def pytest_addoption(parser):
    parser.addoption("--cpu-report", action="store_true",
                     help="print the CPU each test file used, its processes included (tests/_cpu_report.py)")


def pytest_configure(config):
    if config.getoption("--cpu-report"):
        import _cpu_report

        config.pluginmanager.register(_cpu_report, "cpu_report")  # pytest then calls its pytest_configure
