"""Tier 1: the sampler's batch-index map follows the part and the batch, not the graph ("part" against the
global "array" map)."""
import threading

import numpy as np
import pytest

from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.sampling import LocalHops, NeighborSampler, kernels


@pytest.fixture(scope="module")
def graph():
    return make_synthetic(SyntheticSpec(num_nodes=20000, avg_degree=12, num_features=4))


class PartOwned:
    """Samples the whole graph but, like DistributedHops, exposes the rank's own rows as `local`."""

    def __init__(self, graph, lo, hi):
        self.whole = LocalHops(graph.rowptr, graph.col)
        self.local = LocalHops(graph.rowptr[lo:hi + 1] - graph.rowptr[lo],
                               graph.col[graph.rowptr[lo]:graph.rowptr[hi]], lo)

    def sample(self, gids, fanout, seed):
        return self.whole.sample(gids, fanout, seed)


def _same(a, b):
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("n_id", "row", "col")) and \
        a.num_sampled_nodes == b.num_sampled_nodes and a.num_sampled_edges == b.num_sampled_edges


@pytest.mark.parametrize("own", [(0, 20000), (5000, 10000), (0, 0)])
def test_part_map_gives_the_array_map_batches_while_growing(graph, own):
    array = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [15, 10, 5], relabel="array")
    part = NeighborSampler(PartOwned(graph, *own), graph.num_nodes, [15, 10, 5], relabel="part")
    rng = np.random.default_rng(0)
    slots = []
    for i, size in enumerate([1, 3, 50, 2000, 7, 6000, 64]):  # grows mid-batch, then small batches again
        seeds = np.sort(rng.choice(graph.train_idx, size, replace=False))
        assert _same(array.sample(seeds, i), part.sample(seeds, i)), size
        slots.append(len(part._local.table) // 2 if own != (0, 20000) else 0)
        if own != (0, 20000):
            assert (part._local.table[0::2] == -1).all()
        assert (part._local.scratch == -1).all()  # cleaned
    assert len(part._local.scratch) == own[1] - own[0]
    # owning every node, the map is the array map: no table at all
    assert slots == sorted(slots) and (slots[-1] > 1024) == (own != (0, 20000))
    assert hasattr(part._local, "table") == (own != (0, 20000))
    with pytest.raises(ValueError, match="distinct"):
        part.sample(np.array([5, 5]), 0)
    assert (part._local.scratch == -1).all()


def test_memory_does_not_depend_on_the_node_count(graph):
    """A sampler told the graph has 2^40 nodes allocates its part and its batch, nothing of that size; auto
    takes the part map for a part of any graph, the array where the sampler owns every node."""
    assert NeighborSampler(PartOwned(graph, 1000, 3000), graph.num_nodes, [5]).relabel == "part"
    whole = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [5])
    assert whole.relabel == "array" and whole.scratch_bytes == 8 * graph.num_nodes
    huge = NeighborSampler(PartOwned(graph, 1000, 3000), 2**40, [5, 5])
    assert huge.relabel == "part"
    small = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [5, 5], relabel="array")
    seeds = graph.train_idx[:256]
    assert _same(huge.sample(seeds, 3), small.sample(seeds, 3))
    assert huge._local.scratch.nbytes == 8 * 2000
    assert huge._local.table.nbytes <= 16 * 4 * 256 * 31  # twice the batch's nodes at most, 16 bytes a slot


def test_each_thread_has_its_own_map(graph):
    sampler = NeighborSampler(PartOwned(graph, 0, 10000), graph.num_nodes, [4, 4], relabel="part")
    want = {i: sampler.sample(graph.train_idx[i * 100:(i + 1) * 100], i) for i in range(4)}
    got = {}

    def work(i):
        for _ in range(5):
            got[i] = sampler.sample(graph.train_idx[i * 100:(i + 1) * 100], i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(_same(want[i], got[i]) for i in range(4))


def test_kernel_probes_collisions_stops_at_the_limit_and_clears_by_key():
    table = np.full(2 * 64, -1, dtype=np.int64)
    scratch = np.full(4, -1, dtype=np.int64)  # own ids 100..103
    ids = np.array([7, 7 + 64, 101, 3, 2**40, 7 + 128, 101], dtype=np.int64)
    n_id = np.empty(8, dtype=np.int64)
    local = np.empty(len(ids), dtype=np.int64)
    done, n, filled = kernels.relabel_hashed(ids, 0, local, scratch, 100, table, 58, n_id, 0, 0, 32)
    assert (done, n, filled, local.tolist()) == (7, 6, 5, [0, 1, 2, 3, 4, 5, 2])
    assert scratch[1] == 2 and n_id[:6].tolist() == [7, 71, 101, 3, 2**40, 135]
    kernels.clear_table(scratch, 100, table, 58, n_id, n, filled)  # 5 keys in 64 slots: cleared key by key
    assert (table[0::2] == -1).all() and (scratch == -1).all()
    done, n, filled = kernels.relabel_hashed(ids, 0, local, scratch, 100, table, 58, n_id, 0, 0, 2)
    assert (done, n, filled) == (3, 3, 2)  # own id 101 needs no slot; stopped before 3, the third for the table
    with pytest.raises(ValueError, match="relabel"):
        NeighborSampler(LocalHops(np.zeros(2, dtype=np.int64), np.zeros(0, dtype=np.int64)), 1, [2], relabel="x")
