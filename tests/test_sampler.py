"""Tier 1: the neighbour sampler on small graphs: validity, without-replacement counts, uniformity, seeds."""
import numpy as np
import pytest
from scipy import stats

from mpignn.data import csr_from_edges, make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.errors import ConfigError
from mpignn.config.graph_options import parse_fanout
from mpignn.sampling import LocalHops, NeighborSampler


@pytest.fixture(scope="module")
def graph():
    return make_synthetic(SyntheticSpec(num_nodes=3000, avg_degree=12, num_features=8))


def _edges(g):
    return set(zip(g.col.tolist(), np.repeat(np.arange(g.num_nodes), np.diff(g.rowptr)).tolist()))


def test_every_sampled_edge_exists_and_counts_are_min_deg_fanout(graph):
    fanouts = [5, 3, -1]
    sampler = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, fanouts)
    out = sampler.sample(graph.train_idx[:64], seed=7)
    edges = _edges(graph)
    src, dst = out.n_id[out.row], out.n_id[out.col]
    assert all((s, d) in edges for s, d in zip(src.tolist(), dst.tolist()))
    assert out.n_id[:64].tolist() == graph.train_idx[:64].tolist()
    assert sum(out.num_sampled_nodes) == len(out.n_id) and sum(out.num_sampled_edges) == len(out.row)
    deg = np.diff(graph.rowptr)
    start = 0
    targets_start = 0
    for hop, (fanout, n_edges) in enumerate(zip(fanouts, out.num_sampled_edges)):
        hop_col = out.col[start:start + n_edges]
        n_targets = out.num_sampled_nodes[hop]
        counts = np.bincount(hop_col - targets_start, minlength=n_targets)
        gids = out.n_id[targets_start:targets_start + n_targets]
        expected = deg[gids] if fanout < 0 else np.minimum(deg[gids], fanout)
        assert np.array_equal(counts, expected), f"hop {hop}"
        # no neighbour twice for one target
        pairs = set(zip(out.row[start:start + n_edges].tolist(), hop_col.tolist()))
        assert len(pairs) == n_edges
        start += n_edges
        targets_start += n_targets


def test_same_seed_same_batch_other_seed_other_batch(graph):
    sampler = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [4, 4])
    a, b = sampler.sample(graph.train_idx[:32], 1), sampler.sample(graph.train_idx[:32], 1)
    c = sampler.sample(graph.train_idx[:32], 2)
    assert np.array_equal(a.n_id, b.n_id) and np.array_equal(a.row, b.row) and np.array_equal(a.col, b.col)
    assert not np.array_equal(a.n_id, c.n_id)


def test_uniform_over_neighbours_chi_square():
    # one hub with 40 neighbours, fanout 5: each neighbour is drawn with probability 5/40
    hub, leaves = 0, np.arange(1, 41)
    rowptr, col = csr_from_edges(leaves, np.zeros(40, dtype=np.int64), 41)
    sampler = NeighborSampler(LocalHops(rowptr, col), 41, [5])
    draws = 4000
    counts = np.zeros(41, dtype=np.int64)
    for seed in range(draws):
        out = sampler.sample(np.array([hub]), seed)
        picked = out.n_id[out.row]
        assert len(set(picked.tolist())) == 5
        counts[picked] += 1
    observed = counts[1:]
    assert observed.sum() == 5 * draws
    p = stats.chisquare(observed).pvalue
    assert p > 0.001, f"chi-square p={p}: not uniform"


def _same_batch(a, b):
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("n_id", "row", "col", "in_degree")) and \
        (a.num_sampled_nodes, a.num_sampled_edges) == (b.num_sampled_nodes, b.num_sampled_edges)


@pytest.mark.parametrize("relabel", ["array", "part"])
def test_a_batch_is_the_same_after_other_batches_as_on_a_fresh_sampler(graph, relabel):
    # The id map is cleaned after each batch (also after refusing repeated seeds): nothing of an earlier batch,
    # which shares nodes with this one, leaks into it. "part": this rank owns the first half of the nodes.
    half = graph.num_nodes // 2
    whole = relabel == "array"

    def source():
        return LocalHops(graph.rowptr, graph.col) if whole else \
            LocalHops(graph.rowptr[:half + 1], graph.col[:graph.rowptr[half]], 0)

    fanouts = [3, 2] if whole else [4]  # a part samples its own rows only: one hop from its seeds
    seeds = graph.train_idx[graph.train_idx < half]
    used = NeighborSampler(source(), graph.num_nodes, fanouts, relabel=relabel)
    used.sample(seeds[:100], 0)
    with pytest.raises(ValueError, match="distinct"):
        used.sample(np.array([seeds[0], seeds[1], seeds[0]]), 1)
    for step in range(3):
        batch = seeds[50 + 40 * step:150 + 40 * step]  # overlaps the batch before it
        fresh = NeighborSampler(source(), graph.num_nodes, fanouts, relabel=relabel)
        assert _same_batch(used.sample(batch, 2 + step), fresh.sample(batch, 2 + step))


def test_empty_seed_batch(graph):
    out = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [3, 2]).sample(np.array([], int), 0)
    assert len(out.n_id) == 0 and out.num_sampled_edges == [0, 0]


@pytest.mark.parametrize("bad", ["", "10,0", "a,b", "-2"])
def test_fanout_nonsense_is_refused(bad):
    with pytest.raises(ConfigError, match="HINT"):
        parse_fanout(bad)


def test_loader_resumes_mid_epoch_with_the_same_batches():
    """set_epoch(epoch, start_step) yields exactly the batches a full pass yields from that step on."""
    from mpignn.exchange import FeatureStore
    from mpignn.loader.batches import BatchLoader

    g = make_synthetic(SyntheticSpec(num_nodes=2000, avg_degree=6, num_features=4))
    loader = BatchLoader(NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [3, 2]),
                        FeatureStore(g.x, g.y, 0), g.train_idx, 64, seed=1)
    loader.set_epoch(2)
    full = [b.n_id for b in loader]
    loader.set_epoch(2, start_step=3)
    tail = [b.n_id for b in loader]
    assert len(tail) == len(full) - 3
    for got, want in zip(tail, full[3:]):
        assert got.tolist() == want.tolist()
