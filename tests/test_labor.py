"""LABOR-0 sampling (`sampling.labor`): each target keeps its fanout in expectation, the Horvitz-Thompson mean
is unbiased, targets that share a source agree on it (so the hop's union shrinks), and all-neighbour fanouts
equal neighbour sampling (Tier 1). Monte Carlo checks run a fixed set of hop seeds, so they are deterministic;
their tolerance is four standard errors of the estimate."""
import numpy as np
import pytest

from mpignn.sampling import kernels
from mpignn.sampling.labor import labor_rows, variate

SEEDS = [kernels.mix_seed(7, s) for s in range(400)]


def _graph(targets=60, sources=2000, max_degree=40, seed=0):
    rng = np.random.default_rng(seed)
    deg = rng.integers(1, max_degree, targets)
    rowptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    col = np.concatenate([rng.choice(sources, d, replace=False) for d in deg]).astype(np.int64)
    return rowptr, col, deg


def _draws(rowptr, col, fanout):
    rows = np.arange(len(rowptr) - 1, dtype=np.int64)
    return [labor_rows(rowptr, col, rows, np.array(fanout, dtype=np.int64).reshape(-1), s) for s in SEEDS]


def test_each_target_keeps_its_fanout_in_expectation():
    rowptr, col, deg = _graph()
    draws = _draws(rowptr, col, 5)
    counts = np.stack([c for c, _, _ in draws])
    want = np.minimum(deg, 5)
    se = np.sqrt(np.maximum(counts.var(0), 1e-12) / len(SEEDS))
    assert np.all(np.abs(counts.mean(0) - want) <= 4 * se + 1e-9)
    assert all(np.array_equal(d, want) for _, _, d in draws)  # the denominators
    assert np.all(counts[:, deg <= 5] == deg[deg <= 5])  # small targets keep everything


def test_the_weighted_mean_is_unbiased():
    rowptr, col, deg = _graph(seed=1)
    x = np.random.default_rng(2).normal(size=2000) + 3.0
    truth = np.array([x[col[a:b]].mean() for a, b in zip(rowptr[:-1], rowptr[1:])])
    estimates = []
    for counts, nbrs, den in _draws(rowptr, col, 4):
        sums = np.add.reduceat(np.append(x[nbrs], 0.0), np.concatenate([[0], np.cumsum(counts)[:-1]]))
        estimates.append(np.where(counts > 0, sums, 0.0) / den)
    estimates = np.stack(estimates)
    se = estimates.std(0) / np.sqrt(len(SEEDS))
    assert np.all(np.abs(estimates.mean(0) - truth) <= 4 * se + 1e-9)


def test_targets_that_share_a_source_agree_and_the_union_shrinks():
    rng = np.random.default_rng(3)
    sources, targets, degree, fanout = 500, 200, 50, 5
    col = np.concatenate([rng.choice(sources, degree, replace=False) for _ in range(targets)]).astype(np.int64)
    rowptr = np.arange(0, (targets + 1) * degree, degree, dtype=np.int64)
    rows = np.arange(targets, dtype=np.int64)
    seed = kernels.mix_seed(1, 2)
    counts, nbrs, _ = labor_rows(rowptr, col, rows, np.array([fanout]), seed)
    kept = set(nbrs.tolist())
    assert kept == {g for g in col.tolist() if variate(seed, [g])[0] < fanout / degree}  # one variate per source
    _, plain = kernels.sample_rows(rowptr, col, rows, rows, np.array([fanout]), seed)
    assert len(kept) <= 0.5 * len(set(plain.tolist()))
    assert abs(counts.mean() - fanout) < 1.0


@pytest.mark.parametrize("fanout", [-1, 40])
def test_all_neighbour_fanouts_equal_neighbour_sampling(fanout):
    rowptr, col, deg = _graph(max_degree=40)
    rows = np.arange(len(deg), dtype=np.int64)
    counts, nbrs, den = labor_rows(rowptr, col, rows, np.array([fanout]), 5)
    c2, n2 = kernels.sample_rows(rowptr, col, rows, rows, np.array([fanout]), 5)
    assert np.array_equal(counts, c2) and np.array_equal(nbrs, n2) and np.array_equal(den, deg)


def test_per_edge_type_fanouts_and_the_twins_agree():
    """One fanout per edge type (rows alternate types, as `LocalHops` lays a heterogeneous target out), and the
    serial and parallel kernels draw alike."""
    rowptr, col, deg = _graph(targets=80)
    rows = np.arange(80, dtype=np.int64)
    fanouts = np.array([3, -1], dtype=np.int64)
    a = labor_rows.serial(rowptr, col, rows, fanouts, 11)
    b = labor_rows.parallel(rowptr, col, rows, fanouts, 11)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert np.array_equal(a[2][1::2], deg[1::2]) and np.array_equal(a[2][::2], np.minimum(deg[::2], 3))
