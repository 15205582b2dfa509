"""Tier 1: link prediction's pieces: the edge split, edge seeds and negatives, the decoder, the metrics."""
import numpy as np
import pytest
import torch

from mpignn.data import make_synthetic
from mpignn.data.links import split_links, undirected_pairs
from mpignn.data.synthetic import SyntheticSpec
from mpignn.exchange import FeatureStore
from mpignn.loader import LinkSeeds, NodeLoader
from mpignn.metrics import LinkScores, auc, positive_ranks
from mpignn.models import build_model, forward_batch
from mpignn.sampling import LocalHops, NeighborSampler


@pytest.fixture(scope="module")
def graph():
    return make_synthetic(SyntheticSpec(num_nodes=3000, avg_degree=8, num_features=8))


def _keys(pairs, n):
    return set((np.minimum(pairs[0], pairs[1]) * n + np.maximum(pairs[0], pairs[1])).tolist())


def test_split_holds_out_edges_without_leakage(graph):
    kept, split = split_links(graph, val=0.05, test=0.1, seed=1, num_tails=5)
    n, m = graph.num_nodes, undirected_pairs(graph.rowptr, graph.col).shape[1]
    train = undirected_pairs(kept.rowptr, kept.col)
    val, test = _keys(split.val_pos, n), _keys(split.test_pos, n)
    assert len(val) == round(0.05 * m) and len(test) == round(0.1 * m)
    assert train.shape[1] == m - len(val) - len(test)
    assert not (_keys(train, n) & (val | test)) and not (val & test)
    # held out in both directions: the message-passing graph stays symmetric
    dst = np.repeat(np.arange(n), np.diff(kept.rowptr))
    assert _keys(np.stack([kept.col, dst]), n) == _keys(train, n)
    every_edge = _keys(undirected_pairs(graph.rowptr, graph.col), n)
    assert not (_keys(split.test_neg, n) & every_edge)
    tails = np.stack([np.repeat(split.test_pos[0], 5), split.test_neg_tails.reshape(-1)])
    assert not (_keys(tails, n) & every_edge) and split.test_neg_tails.shape == (len(test), 5)
    again = split_links(graph, val=0.05, test=0.1, seed=1, num_tails=5)[1]
    np.testing.assert_array_equal(again.test_pos, split.test_pos)  # seeded: every rank-0 run agrees


def test_edge_batches_label_pairs_in_batch_ids(graph):
    sampler = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [4, 3])
    pos = undirected_pairs(graph.rowptr, graph.col)[:, :512]
    loader = NodeLoader(sampler, FeatureStore(graph.x, graph.y, 0), LinkSeeds(pos, graph.num_nodes), 64, seed=2)
    batch = next(iter(loader))
    eli, label = batch.edge_label_index, batch.edge_label
    assert eli.shape == (2, 128) and label.tolist() == [1.0] * 64 + [0.0] * 64
    gids = batch.n_id[eli]
    assert all((int(a), int(b)) in set(zip(pos[0].tolist(), pos[1].tolist())) for a, b in gids[:, :64].T)
    assert eli.max() < batch.batch_size  # endpoints are seeds, first in the batch


def test_tail_negatives_keep_the_source():
    seeds = LinkSeeds(np.array([[1, 2, 3], [4, 5, 6]]), 100, negatives="tail", ratio=2)
    pairs, labels, num_pos, _ = seeds.pairs(np.array([0, 2]), seed=5)
    assert pairs.shape == (2, 6) and num_pos == 2 and labels.sum() == 2
    assert pairs[0, 2:].tolist() == [1, 3, 1, 3]


@pytest.mark.parametrize("model,decoder", [("sage", "dot"), ("gcn", "mlp")])
def test_link_model_scores_pairs_and_learns(graph, model, decoder):
    torch.manual_seed(0)
    sampler = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [4, 3])
    pos = undirected_pairs(graph.rowptr, graph.col)
    loader = NodeLoader(sampler, FeatureStore(graph.x, graph.y, 0), LinkSeeds(pos, graph.num_nodes), 256, seed=2)
    net = build_model(model, 8, 32, 0, 2, task="link", decoder=decoder)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    losses = []
    for step, batch in zip(range(20), loader):
        logits = forward_batch(net, batch)
        assert logits.shape == (batch.edge_label.numel(),)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.edge_label)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def test_auc_is_the_pairwise_win_rate():
    rng = np.random.default_rng(0)
    scores = np.round(rng.standard_normal(400), 1)  # ties on purpose
    labels = rng.integers(0, 2, 400)
    p, n = scores[labels == 1], scores[labels == 0]
    brute = (p[:, None] > n[None]).mean() + 0.5 * (p[:, None] == n[None]).mean()
    assert auc(scores, labels) == pytest.approx(brute)
    assert np.isnan(auc(scores, np.ones(400)))


def test_ranks_mrr_and_hits():
    ranks = positive_ranks(np.array([0.9, 0.1, 0.5]), np.array([[0.1, 0.2], [0.5, 0.6], [0.5, 0.1]]))
    assert ranks.tolist() == [1.0, 3.0, 1.5]

    class Self:  # a one-rank communicator
        def allgather(self, x):
            return [x]

        def Allgatherv(self, send, recv):
            recv[0][:] = send

        def Allreduce(self, send, recv, op=None):
            recv[:] = send

    scores = LinkScores(hits_k=1)
    # 2 positives, their 2 fixed negatives, 2 tails each
    scores.add(np.array([0.9, 0.4, 0.1, 0.5, 0.2, 0.3, 0.6, 0.1]), np.array([1, 1, 0, 0, 0, 0, 0, 0]), 2, 2)
    out = scores.summary(Self())
    assert out["auc"] == pytest.approx(0.75) and out["mrr"] == pytest.approx((1 + 1 / 2) / 2)
    assert out["hits"] == pytest.approx(0.5)
