"""`DeviceSampler` (issue 41 items 1 and 3): one part's batches drawn and relabelled on the device equal the host
sampler's, bit for bit (both samplers, dependent variates, all neighbours, link pairs). What such a loader reads
back to the host: `tests/test_host_syncs.py`."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.sampling import LocalHops, NeighborSampler
from mpignn.sampling.device_hops import DeviceHops
from mpignn.sampling.device_sampler import DeviceSampler, resident


@pytest.fixture(scope="module")
def graph():
    return make_synthetic(SyntheticSpec(num_nodes=3000, avg_degree=8, num_features=16))


def _pair(graph, fanouts, **kw):
    n = graph.num_nodes
    return (NeighborSampler(LocalHops(graph.rowptr, graph.col), n, fanouts, **kw),
            DeviceSampler(DeviceHops(graph.rowptr, graph.col), n, fanouts, **kw))


def _equal(got, want) -> None:
    for name in ("n_id", "row", "col", "in_degree", "mean_over", "edge_weight", "edge_label_index"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert isinstance(a, (torch.Tensor, np.ndarray)) and np.array_equal(np.asarray(a), b), name
    assert got.num_sampled_nodes == want.num_sampled_nodes and got.num_sampled_edges == want.num_sampled_edges
    assert got.batch_size == want.batch_size


@pytest.mark.parametrize("kw", [{}, {"method": "labor"}, {"method": "labor", "layer_dependency": True},
                                {"method": "labor", "iterations": 3}],
                         ids=["neighbor", "labor", "labor-layer-dependency", "labor-3"])
@pytest.mark.parametrize("fanouts", [[5, 4, 3], [-1, 2], [0, 3]], ids=str)
def test_device_batches_equal_the_host_samplers_bit_for_bit(graph, kw, fanouts):
    host, device = _pair(graph, fanouts, **kw)
    rng = np.random.default_rng(len(fanouts))
    for step in range(4):
        seeds = rng.choice(graph.num_nodes, 64, replace=False)
        variates = (11, 3) if step % 2 else None  # dependent batches' shared, rotated variates
        got = device.sample(seeds, 100 + step, variates)
        assert isinstance(got.n_id, torch.Tensor) and isinstance(got.row, torch.Tensor)
        _equal(got, host.sample(seeds, 100 + step, variates))
    _equal(device.sample_from_edges(seeds[:10], seeds[10:20], 7), host.sample_from_edges(seeds[:10], seeds[10:20], 7))
    assert isinstance(device.with_fanouts([2, 2]), DeviceSampler)


def test_repeated_seeds_are_refused_and_leave_the_map_clean(graph):
    _, device = _pair(graph, [3])
    with pytest.raises(ValueError, match="distinct"):
        device.sample(np.array([1, 2, 1]), 0)
    assert bool((device._scratch() == -1).all())


def test_only_a_one_part_homogeneous_device_source_is_resident(graph):
    hops = DeviceHops(graph.rowptr, graph.col)
    assert resident(hops, graph.num_nodes)
    assert not resident(hops, graph.num_nodes + 1)  # a part of a larger graph: remote hops go through MPI
    assert not resident(LocalHops(graph.rowptr, graph.col), graph.num_nodes)
    with pytest.raises(ValueError, match="owning every node"):
        DeviceSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [3])
