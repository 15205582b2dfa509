"""`runtime.NeighborLoader` and the script-shaped API (issue 39): each trap a PyG user fell into has a test here.

Tier 2 (one rank in this process) and Tier 3 (2 ranks under mpirun: dataset ids across parts, uneven ranks,
one rank's uncaught exception in a module-level script).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from _mpirun import run_mpi, run_mpi_raw
from mpignn import runtime
from mpignn.training.loaders import make_loader
from mpignn.data import load_dataset
from mpignn.errors import ConfigError, is_agreed

SMALL = "synthetic:num_nodes=1500,avg_degree=6,num_features=4"


@pytest.fixture(scope="module")
def graph(rt, tmp_path_factory):
    return runtime.load_local_graph(rt, SMALL, str(tmp_path_factory.mktemp("nl")), cache_size=0,
                                    feature_norm="none")


def _order(loader):
    """The seeds' dataset ids, batch after batch."""
    return np.concatenate([b.n_id[:b.batch_size].numpy() for b in loader])


def _positions(loader, ids):
    """Every batch's input_id, checked as PyG's: positions in the input list `ids` of its seeds."""
    out = []
    for b in loader:
        assert np.array_equal(np.asarray(ids)[b.input_id.numpy()], b.n_id[:b.batch_size].numpy())
        out.append(b.input_id.numpy())
    return np.concatenate(out)


def test_the_loaders_seed_not_torchs_seeds_its_draws_and_the_docs_say_so(graph):
    """A ported script's `torch.manual_seed(S)` reseeds PyG's sampling but not mpignn's, whose draws must match on
    any number of ranks: docs/from-pyg.md says which seed does (it said nothing)."""
    def draws(**kwargs):
        loader = runtime.NeighborLoader(graph, [3, 2], input_nodes="train", batch_size=32, shuffle=True, **kwargs)
        return [np.concatenate([b.input_id.numpy(), b.n_id.numpy()]) for b in loader]

    torch.manual_seed(1)
    one = draws()
    torch.manual_seed(2)
    assert all(np.array_equal(a, b) for a, b in zip(one, draws()))
    assert not all(np.array_equal(a, b) for a, b in zip(one, draws(seed=2)))
    text = (Path(__file__).resolve().parent.parent / "docs" / "from-pyg.md").read_text()
    assert "the loader's `seed=`" in text and "`torch.manual_seed(S)` seeds the weights and dropout only" in text


def test_each_pass_reshuffles_and_redraws_without_set_epoch(graph):
    loader = runtime.NeighborLoader(graph, [5, 5], input_nodes="train", batch_size=64, shuffle=True)
    first, second = _order(loader), _order(loader)
    assert sorted(first) == sorted(second) and not np.array_equal(first, second)
    assert loader.epoch == 1
    loader.set_epoch(0)  # resuming at an exact epoch replays it
    assert np.array_equal(_order(loader), first)
    fixed = runtime.NeighborLoader(graph, [5, 5], input_nodes="train", batch_size=64)
    a, b = [next(iter(fixed)).n_id.numpy() for _ in range(2)]  # same seeds, new neighbour draws
    assert np.array_equal(a[:64], b[:64]) and not np.array_equal(a, b)


def test_batches_carry_dataset_ids_and_the_hops_asked_for(graph):
    data = load_dataset(SMALL)
    loader = runtime.NeighborLoader(graph, [4, 3], input_nodes=None, batch_size=100)
    seen = []
    for batch in loader:
        n_id = batch.n_id.numpy()
        assert np.allclose(batch.x.numpy(), np.asarray(data.x)[n_id])  # rows are those of the dataset's ids
        assert np.array_equal(batch.input_id.numpy(), n_id[:batch.batch_size])
        assert np.array_equal(batch.y[:batch.batch_size].numpy(), np.asarray(data.y)[batch.input_id.numpy()])
        assert len(batch.num_sampled_nodes) == 3 and batch.part_n_id.shape == batch.n_id.shape
        seen.append(batch.input_id.numpy())
    assert sorted(np.concatenate(seen)) == list(range(data.num_nodes))  # None: every node once


def test_get_idx_split_and_print_read_as_ogb_and_pyg_scripts_use_them(graph):
    data = load_dataset(SMALL)
    split = graph.get_idx_split()
    for key, ids in (("train", data.train_idx), ("valid", data.val_idx), ("test", data.test_idx)):
        assert split[key].dtype == torch.int64 and torch.equal(split[key], torch.from_numpy(np.sort(ids)))
    assert repr(graph) == "LocalGraph(rank 0 of 1: 1500 own nodes of 1500, 4 features, 8 classes)"
    graph.runtime.synchronize()  # PyG's torch.cuda.synchronize(), on whatever the rank computes on


def test_input_nodes_as_mask_and_ids_over_dataset_ids(graph):
    data = load_dataset(SMALL)
    mask = np.zeros(data.num_nodes, dtype=bool)
    mask[[3, 17, 400, 1499]] = True
    by_mask = runtime.NeighborLoader(graph, [2], input_nodes=torch.from_numpy(mask), batch_size=8)
    assert sorted(_order(by_mask)) == [3, 17, 400, 1499]
    assert sorted(_positions(by_mask, np.flatnonzero(mask))) == [0, 1, 2, 3]  # PyG: positions in mask.nonzero()
    by_ids = runtime.NeighborLoader(graph, [2], input_nodes=torch.tensor([1499, 3, 400]), batch_size=2)
    assert list(_order(by_ids)) == [1499, 3, 400]  # the order given, as PyG keeps it without shuffle (was sorted)
    # PyG's input_id: positions in input_nodes (it held the seeds' ids)
    assert list(_positions(by_ids, [1499, 3, 400])) == [0, 1, 2]
    shuffled = runtime.NeighborLoader(graph, [2], input_nodes=torch.tensor([1499, 3, 400, 17]), batch_size=3,
                                      shuffle=True)
    assert sorted(_positions(shuffled, [1499, 3, 400, 17])) == [0, 1, 2, 3]
    train = runtime.NeighborLoader(graph, [2], input_nodes="train", batch_size=4096)
    assert sorted(_order(train)) == sorted(np.asarray(data.train_idx))
    assert sorted(_positions(train, np.sort(np.asarray(data.train_idx)))) == list(range(len(data.train_idx)))


@pytest.mark.parametrize("kwargs, words", [
    ({"input_nodes": "valid"}, "names no split"),
    ({"input_nodes": torch.zeros(10, dtype=torch.bool)}, "mask of shape (10,)"),
    ({"input_nodes": torch.tensor([0, 99999])}, "outside [0, 1500)"),
    ({"input_nodes": torch.tensor([0.5])}, "1-D integer id tensor"),
    ({"input_nodes": torch.tensor([3, 3, 5])}, "1 repeated id(s)"),  # PyG trains it twice; it was merged
    ({"input_nodes": ("paper", torch.tensor([1]))}, "this graph has one node type"),
    ({"fanouts": [5]}, "takes num_neighbors"),
    ({"batch_size": 0}, "positive int"),
    ({"workers": 2}, "unknown keyword 'workers'"),
])
def test_bad_arguments_are_one_line_errors_with_a_hint(graph, kwargs, words):
    args = {"num_neighbors": [5], **kwargs}
    if "fanouts" in kwargs:
        args.pop("num_neighbors")
        with pytest.raises(ConfigError, match="HINT") as err:
            runtime.NeighborLoader(graph, None, **args)
    else:
        with pytest.raises(ConfigError, match="HINT") as err:
            runtime.NeighborLoader(graph, **args)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_pyg_worker_keywords_are_accepted(graph):
    loader = runtime.NeighborLoader(graph, [3], input_nodes="val", batch_size=32, num_workers=4,
                                    persistent_workers=True)
    assert len(loader) == -(-len(graph.part.val_idx) // 32)


def test_make_loader_refuses_num_neighbors_and_unknown_splits(rt, graph):
    with pytest.raises(ConfigError, match="num_neighbors is runtime.NeighborLoader's"):
        make_loader(rt, graph, "train", num_neighbors=[5])
    with pytest.raises(ConfigError, match="split must be one of"):
        make_loader(rt, graph, "valid")


def test_an_unknown_minibatch_is_refused_before_any_collective_even_for_evaluation(rt, graph, monkeypatch):
    """Evaluation rewrites the mode to independent or full: a bogus one was built silently on "val", and
    NeighborLoader chose its seeds (collectives) before refusing it."""
    from mpignn.tasks import make_task

    task = graph.task or make_task()

    def no_seeds(*args, **kwargs):
        raise AssertionError("seeds chosen before the mode was checked")

    monkeypatch.setattr(type(task), "seeds", no_seeds)
    for split in ("val", "train"):
        with pytest.raises(ConfigError, match="minibatch must be one of independent, cooperative, full; got 'bogus'") \
                as err:
            make_loader(rt, graph, split, minibatch="bogus")
        assert is_agreed(err.value)
    monkeypatch.setattr(runtime.NeighborLoader, "_source", no_seeds)
    with pytest.raises(ConfigError, match="minibatch must be one of") as err:
        runtime.NeighborLoader(graph, [3], input_nodes="train", batch_size=16, minibatch="bogus")
    assert is_agreed(err.value)


def test_make_loader_evaluates_larger_batches_than_it_trains(rt, graph):
    """Evaluation runs forward only: EVAL_BATCH_FACTOR times the seeds of a training step (one rank here)."""
    from mpignn.tasks.base import EVAL_BATCH_FACTOR

    train = make_loader(rt, graph, "train", batch_size=16)
    val = make_loader(rt, graph, "val", batch_size=16)
    assert EVAL_BATCH_FACTOR > 1 and len(train) == -(-len(graph.part.train_idx) // 16)
    assert len(val) == -(-len(graph.part.val_idx) // (16 * EVAL_BATCH_FACTOR))
    sizes = [batch.batch_size for batch in val]
    assert sum(sizes) == len(graph.part.val_idx) and 16 < max(sizes) <= 16 * EVAL_BATCH_FACTOR
    asked = make_loader(rt, graph, "test", batch_size=16, eval_batch_size=40)  # --eval-batch-size
    assert len(asked) == -(-len(graph.part.test_idx) // 40)


def test_ddp_runs_unchanged_on_one_rank(rt, graph):
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(graph.num_features, 3))
    batch = next(iter(runtime.NeighborLoader(graph, [3], input_nodes="train", batch_size=16)))
    model(batch.x).sum().backward()
    assert torch.distributed.is_initialized() and torch.distributed.get_world_size() == 1


def test_metrics_weigh_items_not_ranks(rt):
    assert runtime.accuracy(rt, torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 0, 0])) == 0.5
    assert runtime.mean(rt, 12.0, 4) == 3.0
    assert np.isnan(runtime.mean(rt, 0.0, 0))
    with pytest.raises(ConfigError, match="one shape"):
        runtime.accuracy(rt, torch.zeros(3), torch.zeros(4))


@pytest.mark.mpi
def test_two_ranks_dataset_ids_uneven_seeds_and_weighted_metrics(tmp_path):
    run_mpi("neighbor_loader.py", 2, tmp_path, timeout=120)


@pytest.mark.mpi
def test_uncaught_exception_in_a_script_ends_every_rank(tmp_path):
    """A module-level script (no run_main): rank 1 raises after bootstrap while rank 0 waits in a collective."""
    script = tmp_path / "script.py"
    script.write_text("import time\nfrom mpignn.runtime import bootstrap, reduce_sums\nrt = bootstrap()\n"
                      "if rt.rank == 1:\n    raise ValueError('boom on rank one')\n"
                      "reduce_sums(rt, {'a': 1.0})\ntime.sleep(300)\n")
    rc, out = run_mpi_raw(2, [sys.executable, str(script)], timeout=60)
    assert rc != 0
    assert "root cause: rank 1" in out and "ValueError: boom on rank one" in out


def test_docs_api_gives_every_public_signature():
    """docs/api.md writes each public call of mpignn.runtime with every parameter it takes, and the package
    exports nothing it does not document."""
    import inspect
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    api = text[text.index("## Your own training loop"):]
    assert [name for name in runtime.__all__ if f"`{name}" not in api] == []
    calls = [getattr(runtime, name) for name in runtime.__all__ if name not in ("Runtime", "LocalGraph")]
    for fn in calls:
        start = text.find(f"`{fn.__name__}(")
        assert start >= 0, fn.__name__
        written = text[start:text.find("`", start + 1)]
        params = inspect.signature(fn.__init__ if inspect.isclass(fn) else fn).parameters
        for name, param in params.items():
            if name != "self" and param.kind is not param.VAR_KEYWORD:
                assert name in written, (fn.__name__, name)


def test_a_to_hetero_model_trains_under_ddp_on_the_loaders_batches(rt, tmp_path):
    """PyG's heterogeneous pattern: `to_hetero(model, graph.metadata())`, wrapped in DDP with
    find_unused_parameters=True (a batch may lack an edge type, leaving its conv's weights unused: docs/api.md)."""
    from torch.nn.parallel import DistributedDataParallel
    from torch_geometric.nn import SAGEConv, to_hetero

    from mpignn.data import save_npz
    from mpignn.data.synthetic_hetero import make_user_item

    save_npz(str(tmp_path / "ui.npz"), make_user_item(num_items=300, num_users=80, edges_per_item=4))
    graph = runtime.load_local_graph(rt, f"npz:{tmp_path / 'ui.npz'}", str(tmp_path), cache_size=0)
    node_types, edge_types = graph.metadata()
    assert set(node_types) == set(graph.schema.node_types) and all(len(e) == 3 for e in edge_types)

    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = SAGEConv((-1, -1), 16), SAGEConv((-1, -1), graph.num_classes)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    loader = runtime.NeighborLoader(graph, [3, 3], input_nodes="train", batch_size=32, shuffle=True)
    model = to_hetero(GNN(), graph.metadata(), aggr="sum")
    target = graph.schema.target
    first = next(iter(loader))
    with torch.no_grad():  # lazy shapes, before DDP sees the parameters
        model(first.x_dict, first.edge_index_dict)
    ddp = DistributedDataParallel(model, find_unused_parameters=True)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=0.01)
    for batch in loader:
        optimizer.zero_grad()
        out = ddp(batch.x_dict, batch.edge_index_dict)[target][:batch[target].batch_size]
        loss = torch.nn.functional.cross_entropy(out, batch[target].y[:batch[target].batch_size])
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
    with pytest.raises(ConfigError, match="one of each"):
        runtime.load_local_graph(rt, SMALL, str(tmp_path), cache_size=0).metadata()


def test_heterogeneous_batches_carry_each_types_dataset_ids(rt, tmp_path):
    """Each type's n_id is its nodes' ids within the type in the dataset; masks and ids are over the labelled type."""
    from mpignn.data import save_npz
    from mpignn.data.synthetic_hetero import make_user_item

    save_npz(str(tmp_path / "ui.npz"), make_user_item(num_items=300, num_users=80, edges_per_item=4))
    data = load_dataset(f"npz:{tmp_path / 'ui.npz'}", str(tmp_path))
    graph = runtime.load_local_graph(rt, f"npz:{tmp_path / 'ui.npz'}", str(tmp_path), cache_size=0,
                                     feature_norm="none")
    schema, offsets = data.schema, data.schema.offsets
    loader = runtime.NeighborLoader(graph, [3, 3], input_nodes="train", batch_size=64, shuffle=True)
    for batch in loader:
        for k, t in enumerate(schema.node_types):
            rows = offsets[k] + batch[t].n_id.numpy()
            if schema.feature_dims[k]:
                assert np.allclose(batch[t].x.numpy(), np.asarray(data.x)[rows, :schema.feature_dims[k]])
        target, k = batch[schema.target], schema.type_index(schema.target)
        seeds = target.n_id[:target.batch_size].numpy()
        # input_id: positions in the split's ids (within the type, in the dataset's order), on the type's store
        assert np.array_equal(np.sort(np.asarray(data.train_idx) - offsets[k])[target.input_id.numpy()], seeds)
        assert np.array_equal(target.y[:target.batch_size].numpy(), np.asarray(data.y)[offsets[k] + seeds])
    k = schema.type_index(schema.target)
    split = graph.get_idx_split()  # OGB's heterogeneous form: {labelled type: ids within the type}
    own_type = np.sort(np.asarray(data.train_idx) - offsets[k])
    assert torch.equal(split["train"][schema.target], torch.from_numpy(own_type))
    picked = runtime.NeighborLoader(graph, [2, 2], input_nodes=(schema.target, torch.tensor([5, 7, 299])),
                                    batch_size=8)
    assert sorted(np.concatenate([b[schema.target].n_id[:b[schema.target].batch_size].numpy() for b in picked])) \
        == [5, 7, 299]
    assert sorted(np.concatenate([b[schema.target].input_id.numpy() for b in picked])) == [0, 1, 2]
    with pytest.raises(ConfigError, match="mask of shape"):
        runtime.NeighborLoader(graph, [2, 2], input_nodes=torch.zeros(schema.node_counts[k] + 1, dtype=torch.bool))
    # seeds of another type, as PyG's (type, nodes) or its name (both were refused): that type's store holds them
    u = schema.type_index("user")
    users = runtime.NeighborLoader(graph, [2, 2], input_nodes=("user", torch.tensor([9, 1, 40])), batch_size=2)
    seeds = [b["user"].n_id[:b["user"].batch_size].numpy() for b in users]
    assert list(np.concatenate(seeds)) == [9, 1, 40]
    assert list(np.concatenate([b["user"].input_id.numpy() for b in users])) == [0, 1, 2]
    for b in users:  # the rows are those users' features; their neighbours are sampled across types
        rows = offsets[u] + b["user"].n_id.numpy()
        if schema.feature_dims[u]:
            assert np.allclose(b["user"].x.numpy(), np.asarray(data.x)[rows, :schema.feature_dims[u]])
    assert sum(b.num_nodes for b in users) > 3
    every_user = runtime.NeighborLoader(graph, [2, 2], input_nodes="user", batch_size=64)
    assert sum(b["user"].batch_size for b in every_user) == schema.node_counts[u]
    with pytest.raises(ConfigError, match="splits hold nodes of the labelled type"):
        runtime.NeighborLoader(graph, [2, 2], input_nodes=("user", "train"))
    with pytest.raises(ConfigError, match="names node type 'nobody'"):
        runtime.NeighborLoader(graph, [2, 2], input_nodes=("nobody", torch.tensor([1])))
    everyone = runtime.NeighborLoader(graph, [2, 2], input_nodes=schema.target, batch_size=64)  # PyG's type name
    assert sum(b[schema.target].batch_size for b in everyone) == schema.node_counts[k]
    # per edge type, as PyG's NumNeighbors checks it: every type named (or a default), one hop count
    first, *rest = schema.edge_types
    per_type = {t: [2, 2] for t in schema.edge_types}
    assert len(runtime.NeighborLoader(graph, per_type, input_nodes="train", batch_size=64)) > 0
    assert len(runtime.NeighborLoader(graph, {first: [2, 2], "default": [1, 1]}, batch_size=64)) > 0
    with pytest.raises(ConfigError, match="the same number of hops for every edge type") as err:
        runtime.NeighborLoader(graph, {**per_type, first: [2]}, batch_size=64)  # was: the first type's hops won
    assert is_agreed(err.value)
    if rest:  # was: the types left out took every neighbour
        with pytest.raises(ConfigError, match="no fanouts for edge type"):
            runtime.NeighborLoader(graph, {first: [2, 2]}, batch_size=64)


def test_one_rank_group_leaves_the_environment_children_inherit(rt, monkeypatch):
    """A script that bootstraps and then starts mpirun itself must not hand it MASTER_ADDR/RANK/WORLD_SIZE."""
    import os

    for name in ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GLOO_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    runtime.shutdown()
    again = runtime.bootstrap(logging_setup=False)
    assert torch.distributed.is_initialized() and again.world_size == 1
    assert not {"MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK"} & set(os.environ)


def test_a_cpu_training_graph_compiles_dropout_where_one_rank_per_host_compiles_the_samplers(rt, tmp_path,
                                                                                            monkeypatch):
    """numba writes its cache as it compiles: dropout's kernels compile in the graph's per-host block when the
    config trains with dropout, not on every rank's first step (their argument types: tests/test_dropout.py);
    a graph built for a loop of your own (GraphOptions) does not load them."""
    from mpignn.config.train_config import TrainConfig
    from mpignn.models import dropout
    from mpignn.mpi import prep

    blocks = []
    real = prep.root_first
    monkeypatch.setattr(dropout, "warm_up", lambda: blocks.append("dropout"))
    monkeypatch.setattr("mpignn.runtime.graph.root_first",
                        lambda *a, **k: blocks.append(k.get("what")) or real(*a, **k))
    runtime.build_local_graph(rt, TrainConfig(dataset=SMALL, root=str(tmp_path), cache_size=0))
    assert blocks[-2:] == ["compiling the numba kernels", "dropout"], blocks
    runtime.load_local_graph(rt, SMALL, str(tmp_path), cache_size=0)
    assert blocks[-1] == "compiling the numba kernels", blocks
