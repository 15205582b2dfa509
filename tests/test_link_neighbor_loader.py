"""`runtime.LinkNeighborLoader`, held to PyG's LinkNeighborLoader (Tier 2 on one process, Tier 3 on 2 ranks
through w:link_neighbor_loader): seed edges in dataset ids, every edge when none are given, `edge_label_index`
in the batch's local ids, `input_id` the edges' positions, binary and triplet negatives of PyG's shapes, drawn
alike on 1 and 2 ranks; what it does not take is refused in one line."""
import sys

import numpy as np
import pytest
import torch

from _mpirun import WORKERS, run_mpi

from mpignn.data import load_dataset
from mpignn.errors import ConfigError
from mpignn.runtime import LinkNeighborLoader

from test_user_inference import graph  # noqa: F401  (the fixture: the same 300-node graph on one process)

sys.path.insert(0, str(WORKERS))
from link_neighbor_loader import GRAPH, epoch_record  # noqa: E402


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
    with pytest.raises(ConfigError, match=r"edge_label_index holds ids outside \[0, 300\)"):
        LinkNeighborLoader(graph, [3], edge_label_index=torch.tensor([[0, 1], [2, 300]]))


@pytest.mark.mpi
def test_two_ranks_train_every_edge_and_draw_one_processs_negatives(graph, tmp_path):
    np.savez(tmp_path / "one.npz", **epoch_record(graph, [3, 3], seed=7))
    run_mpi("link_neighbor_loader.py", 2, tmp_path, timeout=150)
