"""LABOR-0 sampling (`sampling.labor`): each target keeps its fanout in expectation, the Horvitz-Thompson mean
is unbiased, targets that share a source agree on it (so the hop's union shrinks), and all-neighbour fanouts
equal neighbour sampling (Tier 1). Monte Carlo checks run a fixed set of hop seeds, so they are deterministic;
their tolerance is four standard errors of the estimate."""
import re

import numpy as np
import pytest

from mpignn.sampling import kernels, labor
from mpignn.sampling.labor import labor_rows

SEEDS = [kernels.mix_seed(7, s) for s in range(400)]


def variate(seed, gids, shift=0):
    """The variates `labor_rows` gives the nodes `gids` (float64 in [0, 1))."""
    return labor._variates(np.uint64(seed), np.ascontiguousarray(gids, dtype=np.int64), np.uint64(shift))


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


def test_a_labor_batch_carries_its_denominators_and_all_neighbours_equal_neighbor_batches():
    """`NeighborSampler(method="labor")`: `mean_over` beside `in_degree`, one per hop target; with every
    neighbour asked for, the batch equals neighbour sampling's and its denominators are the degrees."""
    from mpignn.sampling import LocalHops, NeighborSampler

    rowptr, col, deg = _graph(targets=2000, sources=2000, max_degree=12)
    hops = LocalHops(rowptr, col)
    seeds = np.arange(0, 2000, 37, dtype=np.int64)
    out = NeighborSampler(hops, 2000, [4, 3], method="labor").sample(seeds, 9)
    assert out.mean_over is not None and len(out.mean_over) == len(out.in_degree) == sum(out.num_sampled_nodes[:-1])
    assert np.array_equal(out.mean_over[:len(seeds)], np.minimum(deg[seeds], 4))
    every = NeighborSampler(hops, 2000, [-1, -1], method="labor").sample(seeds, 9)
    plain = NeighborSampler(hops, 2000, [-1, -1]).sample(seeds, 9)
    for key in ("n_id", "row", "col", "in_degree"):
        assert np.array_equal(getattr(every, key), getattr(plain, key)), key
    assert np.array_equal(every.mean_over, every.in_degree) and plain.mean_over is None
    with pytest.raises(ValueError, match="method must be one of"):
        NeighborSampler(hops, 2000, [2], method="layer")


def test_sage_divides_a_labor_hop_by_its_denominators():
    """`MeanAdjacency` with `mean_over`: each target's sum over its kept sources, divided by min(degree, k)."""
    import torch

    from mpignn.models.aggregate import MeanAdjacency

    row = torch.tensor([2, 3, 4, 2])  # target 0 keeps sources 2, 3, 4; target 1 keeps source 2
    col = torch.tensor([0, 0, 0, 1])
    x = torch.arange(10, dtype=torch.float32).reshape(5, 2)
    counts, mean_over = torch.tensor([3, 1]), torch.tensor([4, 2])
    got = MeanAdjacency(row, col, 2, 5, counts, mean_over).mean(x)
    want = torch.stack([(x[2] + x[3] + x[4]) / 4, x[2] / 2])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(MeanAdjacency(row, col, 2, 5, counts).mean(x),
                               torch.stack([(x[2] + x[3] + x[4]) / 3, x[2]]))


def _bipartite(targets=40, sources=400, max_degree=30, seed=1):
    """Targets 0..targets-1 whose in-neighbours are other nodes only (rows of their own, without edges): one
    hop's sources are never its targets, so every source has GCN's degree 1."""
    rng = np.random.default_rng(seed)
    deg = np.concatenate([rng.integers(1, max_degree, targets), np.zeros(sources, dtype=np.int64)])
    rowptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    col = np.concatenate([targets + rng.choice(sources, d, replace=False) for d in deg]).astype(np.int64)
    return rowptr, col, targets + sources


def _logits(model, x, out):
    import torch

    edge_index = torch.from_numpy(np.stack([out.row, out.col]))
    extra = {} if out.mean_over is None else {"mean_over": torch.from_numpy(out.mean_over)}
    return model(x[torch.from_numpy(out.n_id)], edge_index, out.num_sampled_nodes, out.num_sampled_edges,
                 torch.from_numpy(out.in_degree), **extra)[:out.batch_size]


@pytest.mark.parametrize("kind", ["gcn", "gat"])
def test_gcn_and_gat_take_labor_batches_and_all_neighbours_give_neighbour_sampling_logits(kind):
    import torch

    from mpignn.models import build_model
    from mpignn.sampling import LocalHops, NeighborSampler

    rowptr, col, n = _bipartite()
    hops, seeds = LocalHops(rowptr, col), np.arange(40, dtype=np.int64)
    torch.manual_seed(0)
    x, model = torch.randn(n, 4), build_model(kind, 4, 8, 2, 1).eval()
    every = _logits(model, x, NeighborSampler(hops, n, [-1], method="labor").sample(seeds, 3))
    torch.testing.assert_close(every, _logits(model, x, NeighborSampler(hops, n, [-1]).sample(seeds, 3)))
    assert torch.isfinite(_logits(model, x, NeighborSampler(hops, n, [4], method="labor").sample(seeds, 3))).all()


def test_a_gcn_layer_on_labor_batches_has_neighbour_samplings_expected_output():
    """Each neighbour of a target is kept with probability min(1, k/d) by both samplers, and a LABOR target
    counts min(d, k) in-edges where neighbour sampling counts what it drew (that many): the layer's mean over
    400 hop seeds agrees with neighbour sampling's within 4.5 standard errors of their difference (the largest
    gap 2.9; counting the edges LABOR kept instead, whose number varies, puts it at 5.7: fanout 2, rows of mean
    3, where 1/sqrt(1 + count) is most unlike its mean)."""
    import torch

    from mpignn.models import build_model
    from mpignn.sampling import LocalHops, NeighborSampler

    rowptr, col, n = _bipartite()
    hops, seeds = LocalHops(rowptr, col), np.arange(40, dtype=np.int64)
    torch.manual_seed(0)
    x, model = torch.randn(n, 4) + 3, build_model("gcn", 4, 8, 2, 1).eval()
    runs = {}
    with torch.no_grad():
        for method in ("labor", "neighbor"):
            sampler = NeighborSampler(hops, n, [2], method=method)
            runs[method] = torch.stack([_logits(model, x, sampler.sample(seeds, s)) for s in SEEDS]).double()
    diff = runs["labor"].mean(0) - runs["neighbor"].mean(0)
    se = (runs["labor"].var(0) / len(SEEDS) + runs["neighbor"].var(0) / len(SEEDS)).sqrt()
    drew = se > 0  # targets within the fanout take every neighbour under both: equal outputs
    assert drew.any() and (diff[~drew].abs() < 1e-9).all()
    assert (diff[drew].abs() <= 4.5 * se[drew]).all(), (diff[drew].abs() / se[drew]).max()


@pytest.mark.parametrize("argv,needle", [
    (["--sampler", "layer"], "--sampler must be one of neighbor, labor; got 'layer'. HINT"),
])
def test_what_labor_cannot_train_is_refused_before_anything_runs(argv, needle):
    from _config import parse
    from mpignn.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        parse(argv)
    assert needle in str(err.value) and "HINT" in str(err.value) and "\n" not in str(err.value)


def test_a_heterogeneous_graph_refuses_labor_on_every_rank_alike(tmp_path):
    from mpignn import train
    from mpignn.data.npz import save_npz
    from mpignn.data.synthetic_hetero import make_user_item
    from mpignn.errors import ConfigError, is_agreed

    save_npz(str(tmp_path / "h.npz"), make_user_item(num_items=300, num_users=80, edges_per_item=4))
    with pytest.raises(ConfigError) as err:
        train.main(["--dataset", f"npz:{tmp_path / 'h.npz'}", "--root", str(tmp_path / "data"), "--epochs", "1",
                    "--threads", "1", "--sampler", "labor"])
    assert is_agreed(err.value) and str(err.value).startswith("--sampler labor samples homogeneous graphs")


def test_labor_trains_on_fewer_input_rows_than_neighbour_sampling(tmp_path):
    """One process, the CLI: the samplers train the same graph; LABOR's steps compute fewer input rows, and
    LABOR-2's (`--labor-iterations 2`, test_labor_importance) fewer still, at the same accuracy."""
    import json

    from mpignn import train

    graph = "synthetic:num_nodes=3000,avg_degree=20,num_features=16,num_classes=4"
    records = {}
    for name, flags in (("neighbor", ["--sampler", "neighbor"]), ("labor", ["--sampler", "labor"]),
                        ("labor-2", ["--sampler", "labor", "--labor-iterations", "2"])):
        out = tmp_path / f"{name}.jsonl"
        assert train.main(["--dataset", graph, "--root", str(tmp_path / "data"), "--epochs", "3", "--threads", "1",
                           "--fanout", "10,5", "--hidden", "32", "--batch-size", "256", "--minibatch", "independent",
                           *flags, "--metrics-out", str(out)]) == 0
        records[name] = [json.loads(line) for line in out.read_text().splitlines()][-1]
    labor, plain, star = records["labor"], records["neighbor"], records["labor-2"]
    assert labor["rows_per_step"][0] < 0.8 * plain["rows_per_step"][0]
    assert star["rows_per_step"][0] < 0.95 * labor["rows_per_step"][0]
    for rec in (labor, star):  # 4 classes
        assert rec["test_acc"] > 0.25 + 0.1 and abs(rec["test_acc"] - plain["test_acc"]) < 0.05


TWO_RANK = {"coop": ["--minibatch", "cooperative"],
            "coop-dependent": ["--minibatch", "cooperative", "--layer-dependency", "--batch-dependency", "4"],
            "dependent": ["--batch-dependency", "8", "--minibatch", "independent", "--cache-size", "0"],
            "coop-star": ["--minibatch", "cooperative", "--labor-iterations", "2"],  # LABOR-2 (test_labor_importance)
            "star": ["--minibatch", "independent", "--labor-iterations", "2", "--cache-size", "0"]}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """The 2-rank labor runs of TWO_RANK, in one job."""
    from _mpirun import train_runs

    base = tmp_path_factory.mktemp("labor")
    return base, train_runs(2, base, ["--root", base / "data", "--dataset",
                                      "synthetic:num_nodes=3000,avg_degree=10,num_features=8,num_classes=4",
                                      "--epochs", "2", "--fanout", "5,5", "--hidden", "16", "--batch-size", "128",
                                      "--sampler", "labor"], TWO_RANK)


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["coop", "coop-dependent", "coop-star", "star"])
def test_two_ranks_train_labor_in_each_mode(two_ranks, name):
    from _mpirun import records

    recs, out = records(*two_ranks, name)
    assert "final test accuracy" in out and re.search(r"input [\d,]+ rows/step", out), out[-2000:]
    if name == "coop-dependent":  # the input rows a recent batch brought are not sent again (test_cooperative)
        assert recs and all(0 < r["recent_hit_rate"] < 1 for r in recs), recs
        assert re.search(r"recent 0\.\d\d", out), out[-2000:]


def test_a_window_rotates_every_variate_by_its_share_of_the_range():
    from mpignn.sampling.labor import window

    assert window(13, 1) == (13, 0) and window(13, 4) == (3, 1 * ((1 << 53) // 4)) and window(8, 4) == (2, 0)
    gids = np.arange(50)
    base = variate(9, gids)
    for step in range(4):
        rotated = variate(9, gids, window(step, 4)[1])
        np.testing.assert_allclose(rotated, (base + step / 4) % 1.0, atol=1e-15)


def test_dependent_steps_keep_each_targets_fanout_and_share_most_sources():
    """A rotated step is still a LABOR-0 draw (each target keeps its fanout in expectation), and consecutive
    steps of a window keep most of each other's sources where independent seeds keep few."""
    from mpignn.sampling.labor import window

    rowptr, col, deg = _graph()
    rows = np.arange(len(deg), dtype=np.int64)
    k, dependency = 5, 16
    counts = np.stack([labor_rows(rowptr, col, rows, np.array([k]), s, window(3, dependency)[1])[0] for s in SEEDS])
    se = np.sqrt(np.maximum(counts.var(0), 1e-12) / len(SEEDS))
    assert np.all(np.abs(counts.mean(0) - np.minimum(deg, k)) <= 4 * se + 1e-9)

    def sources(seed, step):
        return set(labor_rows(rowptr, col, rows, np.array([k]), seed, window(step, dependency)[1])[1].tolist())

    shared = [len(sources(s, 0) & sources(s, 1)) / len(sources(s, 0)) for s in SEEDS[:50]]
    fresh = [len(sources(s, 0) & sources(t, 0)) / len(sources(s, 0)) for s, t in zip(SEEDS[:50], SEEDS[50:100])]
    assert np.mean(shared) > 0.65 and np.mean(fresh) < 0.45, (np.mean(shared), np.mean(fresh))  # 0.75, 0.36


def test_a_training_loader_shares_variates_within_a_window_only():
    """`BatchLoader` with a labor sampler of dependency K: the hops of steps in one window draw with one seed
    (rotated), a new window with another; evaluation loaders (no wrap) draw each step its own."""
    from mpignn.exchange.features import FeatureStore
    from mpignn.loader.batches import BatchLoader
    from mpignn.sampling import LocalHops, NeighborSampler

    rowptr, col, deg = _graph(targets=400, sources=400, max_degree=30, seed=4)
    calls = []

    class Spy(NeighborSampler):
        def sample(self, seeds, seed, variates=None):
            calls.append(variates)
            return super().sample(seeds, seed, variates)

    sampler = Spy(LocalHops(rowptr, col), 400, [5, 5], method="labor", dependency=4)
    features = FeatureStore(np.zeros((400, 2), dtype=np.float32), np.zeros(400, dtype=np.int64), 0)
    for wrap, want in ((True, 8), (False, 0)):
        calls.clear()
        loader = BatchLoader(sampler, features, np.arange(400), 50, wrap=wrap)
        list(loader)
        assert sum(v is not None for v in calls) == want
    loader = BatchLoader(sampler, features, np.arange(400), 50, wrap=True)
    calls.clear()
    list(loader)
    seeds = [v[0] for v in calls]
    assert seeds[0] == seeds[3] != seeds[4] == seeds[7]
    assert [v[1] for v in calls[:4]] == [j * ((1 << 53) // 4) for j in range(4)]


@pytest.mark.parametrize("argv,needle", [
    (["--batch-dependency", "4"], "--batch-dependency 4 makes batches share layer-neighbour variates; --sampler "
                                  "neighbor draws none. HINT: --sampler labor"),
    (["--sampler", "labor", "--batch-dependency", "0"], "--batch-dependency must be a positive int; got 0. HINT"),
    (["--layer-dependency"], "--layer-dependency shares layer-neighbour variates between hops; --sampler neighbor "
                             "draws none. HINT: --sampler labor"),
])
def test_dependencies_need_labor_and_a_positive_window(argv, needle):
    from mpignn.config.graph_options import GraphOptions
    from _config import parse
    from mpignn.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        parse(argv)
    assert needle in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError):
        if argv[-1] == "--layer-dependency":
            GraphOptions(layer_dependency=True)
        else:
            GraphOptions(sampler="labor" if "labor" in argv else "neighbor", batch_dependency=int(argv[-1]))


def test_layer_dependency_gives_a_node_one_variate_for_every_hop_and_fewer_rows():
    """With `layer_dependency` hop h draws with hop 0's seed: a target keeps a source where the source's variate
    under that seed is below the cut, whatever the hop; and the batch reaches fewer nodes."""
    from mpignn.sampling import LocalHops, NeighborSampler

    rowptr, col, _ = _graph(targets=2000, sources=2000, max_degree=30, seed=6)
    hops = LocalHops(rowptr, col)
    seeds = np.arange(0, 2000, 20, dtype=np.int64)
    one = NeighborSampler(hops, 2000, [4, 4, 4], method="labor", layer_dependency=True)
    out = one.sample(seeds, 5)
    r = variate(kernels.mix_seed(5, 0), np.arange(2000))
    deg = np.diff(rowptr)
    targets, sources = out.n_id[out.col], out.n_id[out.row]
    assert np.all(r[sources] < 4 / np.maximum(deg[targets], 4) + (deg[targets] <= 4))
    rows = [sum(NeighborSampler(hops, 2000, [4, 4, 4], method="labor", layer_dependency=same).sample(seeds, s)
                .num_sampled_nodes) for same in (False, True) for s in range(5)]
    assert sum(rows[5:]) < 0.97 * sum(rows[:5]), rows


@pytest.mark.mpi
def test_two_ranks_train_dependent_labor_batches_and_reuse_rows(two_ranks):
    from _mpirun import records

    recs, out = records(*two_ranks, "dependent")
    rec = recs[-1]
    assert rec["recent_hit_rate"] > 0.2 and rec["test_acc"] > 0.35, rec
    assert re.search(r"recent 0\.\d\d", out), out[-2000:]


def test_evaluation_batches_draw_by_neighbour_sampling_whatever_trains(rt, tmp_path):
    """Layer-neighbour batches save training rows; evaluation, forward only, draws neighbour-sampled batches at
    the same fanouts, whose estimates are less noisy (docs/training.md)."""
    from mpignn import runtime
    from mpignn.training.loaders import make_loader

    graph = runtime.load_local_graph(rt, "synthetic:num_nodes=2000,avg_degree=10,num_features=8", str(tmp_path),
                                     fanout=[5, 5], sampler="labor", labor_iterations=2, cache_size=0)
    train = make_loader(rt, graph, "train", batch_size=128)
    assert (train.sampler.method, train.sampler.iterations) == ("labor", 2)
    samplers = []
    for split in ("val", "test"):
        loader = make_loader(rt, graph, split, batch_size=128)
        assert (loader.sampler.method, loader.sampler.fanouts, loader.sampler.iterations) == ("neighbor", [5, 5], 0)
        batch = next(iter(loader))
        assert getattr(batch, "mean_over", None) is None and getattr(batch, "edge_weight", None) is None
        samplers.append(loader.sampler)
    assert samplers[0] is samplers[1]  # made once: the splits share its id maps
