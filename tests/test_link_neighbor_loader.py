"""`runtime.LinkNeighborLoader`, held to PyG's LinkNeighborLoader (Tier 2 on one process, Tier 3 on 2 ranks
through w:link_neighbor_loader): seed edges in dataset ids, every edge when none are given, `edge_label_index`
in the batch's local ids, `input_id` the edges' positions, binary and triplet negatives of PyG's shapes, drawn
alike on 1 and 2 ranks, on a heterogeneous graph an edge type's seeds on its store in its end types' ids; what
it does not take is refused in one line."""
import sys

import numpy as np
import pytest
import torch

from _mpirun import WORKERS, run_mpi

from mpignn.data import load_dataset, save_npz
from mpignn.data.synthetic_hetero import make_user_item
from mpignn.errors import ConfigError
from mpignn.runtime import LinkNeighborLoader, load_local_graph

from test_user_inference import graph  # noqa: F401  (the fixture: the same 300-node graph on one process)

sys.path.insert(0, str(WORKERS))
from link_neighbor_loader import GRAPH, RATED, epoch_record, typed_record  # noqa: E402


@pytest.fixture(scope="module")
def edges():
    return load_dataset(GRAPH).edge_index()


def test_without_edges_every_edge_of_the_graph_is_a_seed_once(graph, edges):
    loader = LinkNeighborLoader(graph, [3, 3], batch_size=100)
    assert len(loader) == -(-edges.shape[1] // 100)
    seen, pairs = [], []
    for batch in loader:
        assert batch.edge_label_index.shape == (2, len(batch.input_id)) and "edge_label" not in batch
        pairs.append(batch.n_id[batch.edge_label_index].numpy())
        seen.append(batch.input_id.numpy())
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(edges.shape[1]))
    got = np.concatenate(pairs, axis=1)
    assert sorted(map(tuple, got.T)) == sorted(map(tuple, edges.T))  # PyG's data.edge_index, each edge once


def test_binary_batches_hold_the_edges_given_then_their_negatives(graph, edges):
    given = torch.from_numpy(edges[:, :50])
    loader = LinkNeighborLoader(graph, [3, 3], edge_label_index=given, neg_sampling="binary", batch_size=20)
    assert len(loader) == 3
    positions = []
    for batch in loader:
        p = len(batch.input_id)
        assert batch.edge_label_index.shape == (2, 2 * p) and batch.edge_label.dtype == torch.float32
        assert torch.equal(batch.edge_label, torch.cat([torch.ones(p), torch.zeros(p)]))
        assert np.array_equal(batch.n_id[batch.edge_label_index[:, :p]].numpy(), edges[:, batch.input_id.numpy()])
        assert int(batch.edge_label_index.max()) < batch.num_nodes  # local ids of the batch's nodes
        positions.append(batch.input_id.numpy())
    assert np.array_equal(np.concatenate(positions), np.arange(50))  # no shuffle: the order given


def test_a_fractional_ratio_draws_that_share_of_negatives_over_a_pass(graph, edges):
    loader = LinkNeighborLoader(graph, [3, 3], edge_label_index=edges[:, :50], neg_sampling_ratio=0.5,
                                batch_size=16, shuffle=True)
    negatives = sum(int((b.edge_label == 0).sum()) for b in loader)
    assert negatives == 25


def test_labels_move_up_one_under_binary_negatives_and_triplets_have_pygs_fields(graph, edges):
    labels = torch.arange(50) % 3
    batch = next(iter(LinkNeighborLoader(graph, [3], edge_label_index=edges[:, :50], edge_label=labels,
                                         neg_sampling="binary", batch_size=50)))
    assert torch.equal(batch.edge_label[:50], labels + 1) and int(batch.edge_label[50:].abs().sum()) == 0
    batch = next(iter(LinkNeighborLoader(graph, [3], edge_label_index=edges[:, :50], edge_label=labels,
                                         batch_size=50)))
    assert torch.equal(batch.edge_label, labels)  # no negatives: the labels as given
    for amount, shape in ((1, (50,)), (2, (50, 2))):
        batch = next(iter(LinkNeighborLoader(graph, [3], edge_label_index=edges[:, :50], batch_size=50,
                                             neg_sampling={"mode": "triplet", "amount": amount})))
        assert "edge_label_index" not in batch and batch.dst_neg_index.shape == shape
        assert np.array_equal(batch.n_id[batch.src_index].numpy(), edges[0, :50])
        assert np.array_equal(batch.n_id[batch.dst_pos_index].numpy(), edges[1, :50])


@pytest.mark.parametrize("kwargs, match", [
    ({"neg_sampling": "triplet", "edge_label": torch.ones(50)}, "edge_label must be None with triplet"),
    ({"neg_sampling": {"mode": "triplet", "amount": 1.5}}, "triplet negatives take a whole amount"),
    ({"neg_sampling": "random"}, "neg_sampling must be 'binary' or 'triplet'"),
    ({"edge_label_time": torch.zeros(50)}, "takes edge_label_time at PyG's default"),
    ({"edge_label": torch.ones(7)}, r"edge_label must hold one label per seed edge \(50\)"),
    ({"fanouts": [3]}, "LinkNeighborLoader takes num_neighbors"),
])
def test_what_it_does_not_take_is_refused_in_one_line(graph, edges, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        LinkNeighborLoader(graph, [3], edge_label_index=edges[:, :50], **kwargs)


def test_ids_outside_the_graph_are_refused(graph):
    with pytest.raises(ConfigError, match=r"edge_label_index row 1 holds ids outside \[0, 300\)"):
        LinkNeighborLoader(graph, [3], edge_label_index=torch.tensor([[0, 1], [2, 300]]))


@pytest.fixture(scope="module")
def hetero(rt, tmp_path_factory):
    root = tmp_path_factory.mktemp("hetero_links")
    save_npz(str(root / "ui.npz"), make_user_item(num_items=300, num_users=80, edges_per_item=4))
    graph = load_local_graph(rt, f"npz:{root / 'ui.npz'}", str(root), cache_size=0, feature_norm="none")
    return graph, np.load(root / "ui.npz")["edge_index__user__rated_by__item"]


def _typed_pairs(batch):
    eli = batch[RATED].edge_label_index
    return np.stack([batch["user"].n_id[eli[0]].numpy(), batch["item"].n_id[eli[1]].numpy()])


def test_heterogeneous_seed_edges_of_one_type_as_pygs(hetero):
    """PyG's heterogeneous forms (they were refused): an edge type for all its edges, `(edge type, index)` in
    each end type's ids; the fields on the edge type's store, the triplet indices on the end types' stores."""
    graph, edges = hetero
    every = list(LinkNeighborLoader(graph, [3, 3], edge_label_index=RATED, batch_size=100))
    got = np.concatenate([_typed_pairs(b) for b in every], axis=1)
    assert sorted(map(tuple, got.T)) == sorted(map(tuple, edges.T))  # every edge of the type once
    positions = np.concatenate([b[RATED].input_id.numpy() for b in every])
    assert np.array_equal(np.sort(positions), np.arange(edges.shape[1]))
    given = torch.from_numpy(edges[:, :60])
    binary = LinkNeighborLoader(graph, {"default": [3, 3]}, edge_label_index=(RATED, given), neg_sampling="binary",
                                batch_size=16, shuffle=True)
    for batch in binary:
        store, pairs = batch[RATED], _typed_pairs(batch)
        p = len(store.input_id)
        assert np.array_equal(pairs[:, :p], edges[:, store.input_id.numpy()])  # positives, then negatives
        assert store.edge_label.tolist() == [1.0] * p + [0.0] * p and pairs.shape == (2, 2 * p)
        assert (pairs[0] < 80).all() and (pairs[1] < 300).all()  # negatives of the end types
    triplet = LinkNeighborLoader(graph, [3, 3], edge_label_index=(RATED, given),
                                 neg_sampling={"mode": "triplet", "amount": 2}, batch_size=16)
    batch = next(iter(triplet))
    pos = batch[RATED].input_id.numpy()
    assert np.array_equal(batch["user"].n_id[batch["user"].src_index].numpy(), edges[0, pos])
    assert np.array_equal(batch["item"].n_id[batch["item"].dst_pos_index].numpy(), edges[1, pos])
    assert tuple(batch["item"].dst_neg_index.shape) == (len(pos), 2)


@pytest.mark.parametrize("index, match", [
    (None, "names its edge type, as PyG's"),
    (("user", "likes", "item"), r"names edge type \('user', 'likes', 'item'\)"),
    ((RATED, torch.tensor([[0], [300]])), r"row 1 holds ids outside \[0, 300\)"),
    ((RATED, torch.tensor([[80], [0]])), r"row 0 holds ids outside \[0, 80\)"),
])
def test_heterogeneous_seed_edges_that_cannot_be_read_are_refused(hetero, index, match):
    with pytest.raises(ConfigError, match=match) as err:
        LinkNeighborLoader(hetero[0], [3, 3], edge_label_index=index)
    assert "HINT" in str(err.value) and "\n" not in str(err.value)


def test_an_edge_type_on_a_homogeneous_graph_is_refused(graph):
    with pytest.raises(ConfigError, match="names an edge type; this graph has one"):
        LinkNeighborLoader(graph, [3], edge_label_index=(("a", "to", "b"), torch.tensor([[0], [1]])))


@pytest.mark.mpi
def test_two_ranks_train_every_edge_and_draw_one_processs_negatives(graph, hetero, tmp_path):
    save_npz(str(tmp_path / "ui.npz"), make_user_item(num_items=300, num_users=80, edges_per_item=4))
    np.savez(tmp_path / "one.npz", **epoch_record(graph, [3, 3], seed=7),
             typed_negatives=typed_record(hetero[0], hetero[1]))
    run_mpi("link_neighbor_loader.py", 2, tmp_path, timeout=150)
