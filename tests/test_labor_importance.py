"""LABOR-i, layer-neighbour sampling with importance-sampling iterations (`--labor-iterations`,
`sampling.labor.labor_importance`): 0 iterations is LABOR-0's draw, each target still keeps its fanout in
expectation, the weighted mean is unbiased before the weights are normalised per target, the iterations
concentrate a hop on fewer sources, SAGE and GCN take the weights, and what cannot take them is refused
(Tier 1). Distributed and cooperative LABOR-3 equal one process's batch: w:dist_sampling and w:coop_step.
Monte Carlo checks run the fixed hop seeds of test_labor."""
import numpy as np
import pytest
from test_labor import SEEDS, _bipartite, _graph

from mpignn.sampling.labor import importance_scales, labor_importance, labor_rows


def _draws(rowptr, col, fanout, iterations, seeds=SEEDS):
    return [labor_importance(rowptr, col, fanout, s, 0, iterations) for s in seeds]


@pytest.mark.parametrize("shift", [0, 3 << 40])
def test_no_iterations_is_labor_0_with_unit_weights(shift):
    rowptr, col, deg = _graph(targets=300, max_degree=120)  # degrees past the kernel's insertion sort
    rows = np.arange(len(deg), dtype=np.int64)
    for fanout in (-1, 5, 200):
        counts, nbrs, den = labor_rows(rowptr, col, rows, np.array([fanout]), 17, shift)
        c2, n2, d2, weight = labor_importance(rowptr, col, fanout, 17, shift, 0)
        assert np.array_equal(counts, c2) and np.array_equal(nbrs, n2) and np.array_equal(den, d2)
        assert weight.dtype == np.float32 and np.all(weight == 1.0)


@pytest.mark.parametrize("iterations", [1, 3])
def test_each_target_keeps_its_fanout_in_expectation(iterations):
    rowptr, col, deg = _graph()
    counts = np.stack([c for c, _, _, _ in _draws(rowptr, col, 5, iterations)])
    se = np.sqrt(np.maximum(counts.var(0), 1e-12) / len(SEEDS))
    assert np.all(np.abs(counts.mean(0) - np.minimum(deg, 5)) <= 4 * se + 1e-9)
    assert np.all(counts[:, deg <= 5] == deg[deg <= 5])


def test_the_probabilities_sum_to_the_fanout_and_saturate_at_one():
    """c_t solves sum_s min(1, c_t pi_s) = k, also where some sources saturate; the serial and parallel twins
    agree; all-ones weights give k / d."""
    rng = np.random.default_rng(5)
    deg = rng.integers(6, 90, 50)
    ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    pi = rng.uniform(0.01, 1.0, ptr[-1]) ** 3  # skewed: the heaviest saturate
    edges = np.arange(ptr[-1], dtype=np.int64)  # each edge its own source
    scale = importance_scales.serial(ptr, edges, pi, 5)
    assert np.array_equal(scale, importance_scales.parallel(ptr, edges, pi, 5))
    sums = [np.minimum(1.0, c * pi[a:b]).sum() for c, a, b in zip(scale, ptr[:-1], ptr[1:])]
    np.testing.assert_allclose(sums, 5.0, rtol=1e-9)
    assert np.array_equal(importance_scales(ptr, edges, np.ones(ptr[-1]), 5), 5 / deg)
    assert np.all(np.isinf(importance_scales(ptr, edges, pi, 100)[deg <= 100]))
    shuffled = np.concatenate([np.random.default_rng(a).permutation(np.arange(a, b))
                               for a, b in zip(ptr[:-1], ptr[1:])])
    assert np.array_equal(importance_scales(ptr, shuffled, pi, 5), scale)  # whatever the order of the edges


@pytest.mark.parametrize("iterations", [1, 3])
def test_the_weighted_mean_is_unbiased_before_normalising(iterations):
    rowptr, col, deg = _graph(seed=1)
    x = np.random.default_rng(2).normal(size=2000) + 3.0
    truth = np.array([x[col[a:b]].mean() for a, b in zip(rowptr[:-1], rowptr[1:])])
    estimates = []
    for counts, nbrs, den, weight in [labor_importance(rowptr, col, 4, s, 0, iterations, normalise=False)
                                      for s in SEEDS]:
        owner = np.repeat(np.arange(len(counts)), counts)
        estimates.append(np.bincount(owner, weights=weight * x[nbrs], minlength=len(counts)) / den)
    estimates = np.stack(estimates)
    se = estimates.std(0) / np.sqrt(len(SEEDS))
    assert np.all(np.abs(estimates.mean(0) - truth) <= 4 * se + 1e-9)


def test_normalised_weights_sum_to_each_targets_denominator_and_keep_their_ratios():
    rowptr, col, deg = _graph(seed=4)
    for s in SEEDS[:20]:
        counts, nbrs, den, weight = labor_importance(rowptr, col, 4, s, 0, 2)
        raw = labor_importance(rowptr, col, 4, s, 0, 2, normalise=False)
        assert np.array_equal(nbrs, raw[1]) and np.array_equal(counts, raw[0])
        owner = np.repeat(np.arange(len(counts)), counts)
        sums = np.bincount(owner, weights=weight, minlength=len(counts))
        np.testing.assert_allclose(sums[counts > 0], den[counts > 0], rtol=1e-5)
        ratio = weight / raw[3]
        np.testing.assert_allclose(ratio, (den / np.maximum(np.bincount(owner, raw[3], len(counts)), 1e-30))[owner],
                                   rtol=1e-5)


def test_iterations_concentrate_a_hop_on_fewer_sources():
    rng = np.random.default_rng(3)
    sources, targets, fanout = 500, 200, 5
    deg = rng.integers(6, 80, targets)
    col = np.concatenate([rng.choice(sources, d, replace=False) for d in deg]).astype(np.int64)
    rowptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    distinct = {i: np.mean([len(np.unique(n)) for _, n, _, _ in _draws(rowptr, col, fanout, i, SEEDS[:40])])
                for i in (0, 1, 3)}
    assert distinct[3] < distinct[1] < 0.95 * distinct[0], distinct


def test_a_sampler_batch_carries_one_weight_per_edge():
    from mpignn.sampling import LocalHops, NeighborSampler

    rowptr, col, _ = _graph(targets=2000, sources=2000, max_degree=30, seed=6)
    hops, seeds = LocalHops(rowptr, col), np.arange(0, 2000, 20, dtype=np.int64)
    star = NeighborSampler(hops, 2000, [4, 4], method="labor", iterations=2)
    out = star.sample(seeds, 5)
    assert out.edge_weight.dtype == np.float32 and len(out.edge_weight) == len(out.row)
    assert np.all(out.edge_weight > 0) and (out.edge_weight != 1).any()
    assert star.with_fanouts([3]).iterations == 2
    assert NeighborSampler(hops, 2000, [4, 4], method="labor").sample(seeds, 5).edge_weight is None
    zero = NeighborSampler(hops, 2000, [4, 4], method="labor").sample(seeds, 5)
    assert sum(out.num_sampled_nodes) < sum(zero.num_sampled_nodes)


def test_mean_adjacency_multiplies_each_edge_by_its_weight():
    import torch

    from mpignn.models.aggregate import MeanAdjacency

    row, col = torch.tensor([2, 3, 4, 2]), torch.tensor([0, 0, 0, 1])
    x = torch.arange(10, dtype=torch.float32).reshape(5, 2)
    weight = torch.tensor([0.5, 2.0, 1.0, 3.0])
    got = MeanAdjacency(row, col, 2, 5, torch.tensor([3, 1]), torch.tensor([4, 2]), weight)
    want = torch.stack([(0.5 * x[2] + 2 * x[3] + x[4]) / 4, 3 * x[2] / 2])
    torch.testing.assert_close(got.mean(x), want)
    g = torch.randn(2, 2)  # the transpose: the gradient of the same weighted mean
    xr = x.clone().requires_grad_(True)
    (got.mean(xr) * g).sum().backward()
    torch.testing.assert_close(got.mean_t(g), xr.grad)


@pytest.mark.parametrize("kind", ["sage", "gcn"])
def test_a_layer_on_weighted_batches_has_neighbour_samplings_expected_output(kind, monkeypatch):
    """A one-layer model's outputs averaged over 400 hop seeds: LABOR-3 with its raw (Horvitz-Thompson) weights
    against neighbour sampling, within 4.5 standard errors of their difference (as test_labor's GCN check):
    the models apply each edge's weight as the estimate needs. (The sampler's normalised weights trade this
    unbiasedness for a lower variance: test_normalised_weights_sum_to_each_targets_denominator...)"""
    import functools

    import torch

    from mpignn.sampling import neighbor

    from mpignn.models import build_model
    from mpignn.sampling import LocalHops, NeighborSampler

    monkeypatch.setattr(neighbor, "labor_importance", functools.partial(labor_importance, normalise=False))
    rowptr, col, n = _bipartite()
    hops, seeds = LocalHops(rowptr, col), np.arange(40, dtype=np.int64)
    torch.manual_seed(0)
    x, model = torch.randn(n, 4) + 3, build_model(kind, 4, 8, 2, 1).eval()

    def logits(out):
        extra = {} if out.mean_over is None else {"mean_over": torch.from_numpy(out.mean_over)}
        if out.edge_weight is not None:
            extra["edge_weight"] = torch.from_numpy(out.edge_weight)
        return model(x[torch.from_numpy(out.n_id)], torch.from_numpy(np.stack([out.row, out.col])),
                     out.num_sampled_nodes, out.num_sampled_edges, torch.from_numpy(out.in_degree),
                     **extra)[:out.batch_size]

    runs = {}
    with torch.no_grad():
        for name, method, iterations in (("star", "labor", 3), ("neighbor", "neighbor", 0)):
            sampler = NeighborSampler(hops, n, [2], method=method, iterations=iterations)
            runs[name] = torch.stack([logits(sampler.sample(seeds, s)) for s in SEEDS]).double()
    diff = runs["star"].mean(0) - runs["neighbor"].mean(0)
    se = (runs["star"].var(0) / len(SEEDS) + runs["neighbor"].var(0) / len(SEEDS)).sqrt()
    drew = se > 0
    assert drew.any() and (diff[~drew].abs() < 1e-6).all()
    assert (diff[drew].abs() <= 4.5 * se[drew]).all(), (diff[drew].abs() / se[drew]).max()


@pytest.mark.parametrize("argv,needle", [
    (["--labor-iterations", "3"], "--labor-iterations 3 weights layer-neighbour sampling; --sampler neighbor draws "
                                  "no variates. HINT: --sampler labor"),
    (["--sampler", "labor", "--labor-iterations", "-1"], "--labor-iterations must be in [0, 16]; got -1. HINT"),
    (["--sampler", "labor", "--labor-iterations", "2", "--model", "gat"],
     "--labor-iterations 2 weights each sampled edge, and --model gat's attention takes no edge weights. HINT"),
])
def test_what_cannot_take_the_weights_is_refused_in_one_line(argv, needle):
    from mpignn.config.graph_options import GraphOptions
    from _config import parse
    from mpignn.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        parse(argv)
    assert needle in str(err.value) and "\n" not in str(err.value)
    if "--model" not in argv:  # the Python API refuses alike (it knows no model here)
        values = dict(zip(argv[::2], argv[1::2]))
        with pytest.raises(ConfigError):
            GraphOptions(sampler=values.get("--sampler", "neighbor"),
                         labor_iterations=int(values["--labor-iterations"]))



def test_the_integer_sums_hold_past_2048_edges():
    # 2048 weights of 1 at 2**52 each overflowed int64 (the sum is 2**63): from 2048 edges on, a bit fewer
    deg = np.array([2047, 2048, 2049, 5000, 70000])
    ptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    edges = np.arange(ptr[-1], dtype=np.int64)
    assert np.array_equal(importance_scales(ptr, edges, np.ones(ptr[-1]), 5), 5 / deg)
    pi = np.random.default_rng(0).uniform(0.2, 1.0, ptr[-1])
    scale = importance_scales(ptr, edges, pi, 5)
    sums = [np.minimum(1.0, c * pi[a:b]).sum() for c, a, b in zip(scale, ptr[:-1], ptr[1:])]
    np.testing.assert_allclose(sums, 5.0, rtol=1e-9)


def test_a_hops_sources_through_the_node_array_are_the_hash_tables_and_leave_it_clean():
    """LABOR-i finds a hop's distinct sources through a per-thread array over the graph's nodes (no probing):
    the same ids in the same order, the same index per edge; the array is all -1 again after, and an id past
    the graph's raises before anything is written."""
    from mpignn.sampling.kernels import first_seen, first_seen_mapped

    rng = np.random.default_rng(3)
    ids = rng.integers(0, 5000, 40000)
    index_of = np.full(5000, -1, dtype=np.int64)
    for chunk in (ids, ids[:7], ids[:0]):
        got, want = first_seen_mapped(chunk, index_of), first_seen(chunk, 5000)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)) and (index_of == -1).all()
    with pytest.raises(ValueError, match="outside the map"):
        first_seen_mapped(np.array([4, 5000]), index_of)
    assert (index_of == -1).all()
