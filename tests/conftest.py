import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def rt():
    """A one-process Runtime (MPICH singleton) for the Python API's in-process tests."""
    from mpignn import runtime

    return runtime.bootstrap(logging_setup=False)
