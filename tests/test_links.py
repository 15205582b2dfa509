"""Tier 1: link prediction's pieces: the edge split, edge seeds and negatives, the decoder, the metrics."""
import numpy as np
import pytest
import torch

from mpignn.data import make_synthetic
from mpignn.data.links import split_links, undirected_pairs
from mpignn.data.synthetic import SyntheticSpec
from mpignn.exchange import FeatureStore
from mpignn.loader.batches import BatchLoader
from mpi_workers.rank_sum_auc import auc
from mpignn.tasks.link_metrics import LinkScores, positive_ranks
from mpignn.models import build_model
from mpignn.models.link import LinkModel
from mpignn.sampling import LocalHops, NeighborSampler
from mpignn.tasks.link import LinkSeeds, score_pairs


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
    loader = BatchLoader(sampler, FeatureStore(graph.x, graph.y, 0), LinkSeeds(pos, graph.num_nodes), 64, seed=2)
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
    loader = BatchLoader(sampler, FeatureStore(graph.x, graph.y, 0), LinkSeeds(pos, graph.num_nodes), 256, seed=2)
    net = LinkModel(build_model(model, 8, 32, 32, 2), 32, decoder)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    losses = []
    for step, batch in zip(range(20), loader):
        logits = score_pairs(net, batch)
        assert logits.shape == (batch.edge_label.numel(),)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.edge_label)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def test_link_batches_of_layer_neighbour_sampling_use_their_denominators(graph):
    """`--task link --sampler labor`: the encoder divides each target's sum by the batch's `mean_over`, as node
    classification does (without it the mean would divide by the count drawn: biased), and all-neighbour
    fanouts score as neighbour sampling does."""
    from mpignn.models.sampled import encode

    torch.manual_seed(0)
    hops, pos = LocalHops(graph.rowptr, graph.col), undirected_pairs(graph.rowptr, graph.col)
    net = LinkModel(build_model("sage", 8, 16, 16, 2), 16).eval()

    def first(method, fanout):
        sampler = NeighborSampler(hops, graph.num_nodes, fanout, method=method)
        return next(iter(BatchLoader(sampler, FeatureStore(graph.x, graph.y, 0), LinkSeeds(pos, graph.num_nodes),
                                     64, seed=2)))

    batch = first("labor", [4, 3])
    assert batch.mean_over is not None
    args = (net.encoder, batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges,
            batch.in_degree)
    z, biased = encode(*args, mean_over=batch.mean_over), encode(*args)
    assert not torch.allclose(z, biased)  # some target kept other than min(degree, 4) of its neighbours
    eli = batch.edge_label_index
    torch.testing.assert_close(score_pairs(net, batch), net.decode(z[eli[0]], z[eli[1]]))
    every, plain = first("labor", [-1, -1]), first("neighbor", [-1, -1])
    torch.testing.assert_close(score_pairs(net, every), score_pairs(net, plain))

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
        size = 1

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


class _Hub:
    """What P threads share to act as P ranks: a barrier, one slot per rank, a queue per (source, dest), and
    the most float64 values any rank received in one call."""

    def __init__(self, size):
        import queue
        import threading

        self.size, self.barrier, self.slots = size, threading.Barrier(size, timeout=60), [None] * size
        self.queues = {(s, d): queue.Queue() for s in range(size) for d in range(size)}
        self.largest = [0] * size


class _ThreadComm:
    """One rank of a `_Hub`: the calls link metrics make (allgather, Allreduce, Allgatherv, Isend, Recv, and the
    checked collectives' Ibarrier)."""

    def __init__(self, hub, rank):
        self.hub, self.rank, self.size = hub, rank, hub.size

    def Get_rank(self):
        return self.rank

    def allgather(self, x):
        self.hub.slots[self.rank] = x
        self.hub.barrier.wait()
        out = list(self.hub.slots)
        self.hub.barrier.wait()
        return out

    def Ibarrier(self):
        self.hub.barrier.wait()
        return type("Done", (), {"Test": lambda self: True})()

    def Allreduce(self, send, recv, op=None):
        recv[:] = np.sum(self.allgather(np.array(send)), axis=0)

    def Allgatherv(self, send, recv):
        both = np.concatenate(self.allgather(np.array(send)))
        recv[0][:] = both
        self._got(both.size)

    def Isend(self, buf, dest, tag=0):
        self.hub.queues[(self.rank, dest)].put(np.array(buf[0]))
        return type("Done", (), {"Wait": lambda self: None})()

    def Recv(self, buf, source, tag=0):
        got = self.hub.queues[(source, self.rank)].get(timeout=60)
        buf[0][:] = got
        self._got(got.size)

    def _got(self, n):
        self.hub.largest[self.rank] = max(self.hub.largest[self.rank], n)


def _on_threads(size, fn):
    """fn(comm, rank) on `size` threads as `size` ranks; their results in rank order."""
    from concurrent.futures import ThreadPoolExecutor

    hub = _Hub(size)
    with ThreadPoolExecutor(size) as pool:
        return [f.result(timeout=120) for f in [pool.submit(fn, _ThreadComm(hub, r), r) for r in range(size)]], hub


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_link_metrics_are_exact_on_any_number_of_ranks_without_gathering_scores(size):
    """Every rank's summary equals the metrics of all pairs on one rank (AUC to the last bit), and no rank
    ever receives more scores at once than the largest rank's own share (the old all-gather held them all)."""
    rng = np.random.default_rng(size)
    num_pos, tails = 900, 4
    pos = np.round(rng.standard_normal(num_pos) + 0.5, 1)  # ties on purpose, within and across ranks
    fixed, tail = np.round(rng.standard_normal(num_pos), 1), np.round(rng.standard_normal((num_pos, tails)), 1)
    cuts = np.sort(rng.integers(1, num_pos, size - 1))
    if size > 2:
        cuts[0] = 0  # rank 0 holds no pairs at all
    shares = np.split(np.arange(num_pos), cuts)

    def rank_summary(comm, rank):
        mine = shares[rank]
        scores = LinkScores(hits_k=2)
        for batch in np.array_split(mine, 3):  # several batches a rank
            k = len(batch)
            scores.add(np.concatenate([pos[batch], fixed[batch], tail[batch].reshape(-1)]),
                       np.concatenate([np.ones(k), np.zeros(k + k * tails)]), k, tails)
        return scores.summary(comm)

    got, hub = _on_threads(size, rank_summary)
    ranks = positive_ranks(pos, tail)
    want = {"auc": auc(np.concatenate([pos, fixed]), np.concatenate([np.ones(num_pos), np.zeros(num_pos)])),
            "mrr": (1 / ranks).mean(), "hits": (ranks <= 2).mean()}
    for out in got:
        assert out["auc"] == want["auc"]
        assert out["mrr"] == pytest.approx(want["mrr"], rel=1e-12) and out["hits"] == pytest.approx(want["hits"])
    assert max(hub.largest) <= max(len(s) for s in shares), (hub.largest, [len(s) for s in shares])


def test_global_auc_sends_negatives_in_bounded_chunks():
    from mpignn.tasks.link_metrics import global_auc

    rng = np.random.default_rng(7)
    scores, labels = np.round(rng.standard_normal(3000), 2), rng.integers(0, 2, 3000)
    shares = np.array_split(np.arange(3000), [100, 2500])  # uneven: 100, 2400 and 500 pairs
    got, hub = _on_threads(3, lambda comm, r: global_auc(comm, scores[shares[r]], labels[shares[r]], chunk=64))
    assert got == [auc(scores, labels)] * 3 and 0 < max(hub.largest) <= 64
    # the classes on different ranks: the same 10 scores negative on rank 0, positive on rank 1 (all ties)
    got, _ = _on_threads(2, lambda comm, r: global_auc(comm, scores[:10], np.full(10, r)))
    assert got == [0.5, 0.5]
    got, _ = _on_threads(2, lambda comm, r: global_auc(comm, scores[:10], np.zeros(10)))
    assert np.isnan(got).all()


@pytest.mark.mpi
def test_link_metrics_are_exact_through_mpi():
    """3 ranks over real MPI: the ring in 1000-score chunks and in the default ones gives `auc` of all pairs
    to the last bit, and each rank's traced peak in `summary` is under the bytes of every score and label."""
    from _mpirun import run_mpi

    out = run_mpi("link_metrics.py", 3, 1000, timeout=120)
    assert out.count("auc=0.") == 3, out[-2000:]
