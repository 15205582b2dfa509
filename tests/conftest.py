import subprocess
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


# One numba thread count's kernels: the serial twins of `compiled.serial_or_parallel` with 1, the parallel ones
# (and dropout's, parallel only) with more.
WARM_UP = """import sys, numba
from mpignn.models import dropout
from mpignn.sampling import kernels, labor
numba.set_num_threads(int(sys.argv[1]))
kernels.warm_up()
labor.warm_up(importance=True)
if sys.argv[2] == "last":
    dropout.warm_up()
"""


def pytest_sessionstart(session):
    """Compile (or load) numba's kernels once, before xdist starts its workers: in a clean clone the first
    processes of each worker, and the first ranks of its jobs, would otherwise all compile them (17 s each).
    Both twins (the jobs' ranks mostly run one numba thread), each in a process of its own, at once: the twins'
    cache files differ by name. In a clean cache 13 s, against 25 s one after the other (2026-12-07)."""
    if hasattr(session.config, "workerinput") or not session.config.pluginmanager.hasplugin("dsession"):
        return  # a worker (the controller wrote the cache), or no xdist (one process compiles what it uses)
    import numba

    counts = sorted({1, numba.config.NUMBA_NUM_THREADS})
    procs = [subprocess.Popen([sys.executable, "-c", WARM_UP, str(n), "last" if n == counts[-1] else ""])
             for n in counts]
    if any([p.wait() for p in procs]):
        raise RuntimeError("compiling numba's kernels failed: see the traceback above")


def pytest_addoption(parser):
    parser.addoption("--cpu-report", action="store_true",
                     help="print the CPU each test file used, its processes included (tests/_cpu_report.py)")


# Seconds each of the longest files takes on the 2-core VM (the larger of its CPU, from `--cpu-report`, and its
# wall time), measured 2026-12-06. Only the order uses them: longest first, so that the two processes of
# `-n 2 --dist loadfile` end together. xdist's own order (the most tests first) left these, most of which hold one
# to five tests, to the end, where one process ran them while the other had nothing left.
LONGEST = {"test_pyg_ports.py": 139, "test_link_cut.py": 111, "test_multihost.py": 90, "test_many_ranks.py": 88,
           "test_node_local.py": 75, "test_multihost_interfaces.py": 71, "test_allocator.py": 66,
           "test_faults.py": 51, "test_collective_timeout.py": 48, "test_startup_bounds.py": 47, "test_jobs.py": 47,
           "test_reproducible.py": 46, "test_cooperative.py": 46, "test_norm_residual.py": 32, "test_slow_link.py": 27,
           "test_wheel.py": 23, "test_no_open_door.py": 18, "test_bench_memory.py": 18}


# Files that mostly wait (a stopped rank, a timeout): they run one after the other beside the longest file, a
# busy one (ten trainings), whose ranks then use the cores they leave idle. test_collective_timeout beside
# test_link_cut (whose cut links also wait) left 38 of a run's 121 idle core-seconds; in this order a run left 97
# (2026-12-06, a timeline of each run: the tests each process ran against vmstat's idle).
WAITING = ("test_startup_bounds.py", "test_collective_timeout.py")


def pytest_collection_modifyitems(config, items):
    files = sorted(dict.fromkeys(item.path.name for item in items), key=lambda name: -LONGEST.get(name, 0))
    busy = [name for name in files if name not in WAITING]
    busy[1:1] = [name for name in WAITING if name in files]  # second and third: the other process takes them
    rank = {name: i for i, name in enumerate(busy)}
    items.sort(key=lambda item: rank[item.path.name])  # stable: each file's tests stay together, in order


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the order above
    if config.getoption("--cpu-report"):
        import _cpu_report

        config.pluginmanager.register(_cpu_report, "cpu_report")  # pytest then calls its pytest_configure
