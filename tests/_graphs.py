"""Small graphs and the shipped datasets' skip marker, shared by the in-process data tests."""
from __future__ import annotations

import pytest

from _mpirun import SHARED
from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec

needs_cora = pytest.mark.skipif(not (SHARED / "datasets" / "Cora").is_dir(),
                                reason="../shared/datasets (the shipped raw files) is absent")


def small_graph(num_nodes: int, seed: int):
    """A synthetic graph of `num_nodes` nodes, 4 features, average degree 4."""
    return make_synthetic(SyntheticSpec(num_nodes=num_nodes, avg_degree=4, num_features=4, seed=seed))
