"""Load: 20 epochs on 3 ranks without memory growth from epoch to epoch."""
import pytest

from mpignn.bench._common import run_train
from mpignn.bench.soak import slope

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def test_twenty_epochs_three_ranks_flat_memory(tmp_path):
    recs = run_train(3, ["--dataset", "synthetic:num_nodes=20000,avg_degree=10,num_features=32", "--root",
                         str(tmp_path), "--epochs", "20", "--hidden", "64", "--batch-size", "256", "--fanout", "10,5",
                         "--eval-every", "5"], timeout=600)
    assert len(recs) == 20
    peaks = [r["peak_rss_mb"] for r in recs]
    assert slope(peaks) < 1.0, peaks  # MiB per epoch over the second half
    assert recs[-1]["test_acc"] > 0.6
