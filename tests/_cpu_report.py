"""Opt-in pytest plugin (conftest's --cpu-report): the CPU each test file used, its subprocesses, MPI ranks and
standing jobs included.

    python -m pytest -n 2 --dist loadfile --cpu-report

Why: the suite is CPU-bound on a 2-core machine, so wall-clock durations mostly tell which tests ran beside
busy ones. Each xdist worker moves itself into a cgroup (v1 cpuacct) of its own, so everything it starts is
counted, orphans and killed jobs too; a test's CPU is the group's usage over that test. Needs root and a
cpuacct hierarchy at /sys/fs/cgroup/cpuacct; elsewhere it reports nothing.
"""
from __future__ import annotations

import collections
import os
import tempfile
from pathlib import Path

import pytest

_GROUPS = Path("/sys/fs/cgroup/cpuacct")
_SESSION = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()  # the controller's pid
_LOG = Path(tempfile.gettempdir()) / f"mpignn-cpu-report-{_SESSION}.tsv"
_group: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _group
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if worker == "main" and getattr(config.option, "numprocesses", None):
        return  # xdist's controller runs no tests: its workers report
    try:
        _group = _GROUPS / f"mpignn-tests-{os.getpid()}-{worker}"
        _group.mkdir(exist_ok=True)
        (_group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        _group = None


def _usage() -> float:
    return int((_group / "cpuacct.usage").read_text()) / 1e9


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if _group is None:
        yield
        return
    before = _usage()
    yield
    with open(_LOG, "a") as f:
        f.write(f"{_usage() - before:.2f}\t{item.nodeid.split('::')[0]}\n")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") or not _LOG.exists():
        return
    by_file: collections.Counter[str] = collections.Counter()
    for line in _LOG.read_text().splitlines():
        seconds, name = line.split("\t")
        by_file[name] += float(seconds)
    _LOG.unlink()
    if _group is not None:  # a run without workers: leave the group, so it can go
        (_GROUPS / "cgroup.procs").write_text(str(os.getpid()))
    for group in _GROUPS.glob("mpignn-tests-*"):  # the workers' groups, empty now that they are gone
        try:
            group.rmdir()
        except OSError:
            pass
    terminalreporter.section(f"CPU per test file (all its processes): {sum(by_file.values()):.0f} s in all")
    for name, seconds in by_file.most_common(25):
        terminalreporter.write_line(f"{seconds:8.1f} s  {name}")
