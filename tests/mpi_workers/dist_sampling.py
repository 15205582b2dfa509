"""Distributed sampling and feature exchange equal single-process results on the whole graph (method
"hetero": a heterogeneous graph, per-edge-type fanouts and edge types included); on homogeneous graphs
layer-neighbour sampling too, its mean denominators included."""
import sys

import numpy as np

from mpignn.data import make_synthetic
from mpignn.data.hetero import type_rowptr
from mpignn.data.synthetic import SyntheticSpec
from mpignn.data.synthetic_hetero import make_user_item
from mpignn.exchange.features import FeatureStore
from mpignn.mpi import run_main, world
from mpignn.partition import load_partition, partition_graph
from mpignn.sampling import LocalHops, NeighborSampler, labor
from mpignn.sampling.distributed import DistributedHops


def main(folder: str, method: str, cache: int) -> None:
    comm = world()
    hetero = method == "hetero"
    if hetero:
        graph, method = make_user_item(num_items=2000, num_users=600, edges_per_item=5), "metis"
    else:
        graph = make_synthetic(SyntheticSpec(num_nodes=3000, avg_degree=10, num_features=5))
    if comm.rank == 0:
        partition_graph(graph, comm.size, folder, method=method, seed=1, force=True)
    comm.Barrier()
    part = load_partition(folder, comm.rank)
    offsets = np.asarray(part.meta.part_offsets)
    node_map = np.load(f"{folder}/node_map.npy")
    # The whole graph in new ids, for the single-process reference.
    inverse = np.empty_like(node_map)
    inverse[node_map] = np.arange(len(node_map))
    whole_rowptr = np.zeros(graph.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.diff(graph.rowptr)[inverse], out=whole_rowptr[1:])
    whole_col = np.concatenate([node_map[graph.col[graph.rowptr[o]:graph.rowptr[o + 1]]] for o in inverse])
    fanouts, typed, t = [4, 3, 2], None, 1
    if hetero:  # per-edge-type fanouts; the whole graph's (row, edge type) runs in new ids
        t = graph.schema.num_etypes
        fanouts = [[4, -1], [3, 2], [2, 5]]
        runs = np.diff(type_rowptr(graph.rowptr, graph.edge_type, t)).reshape(-1, t)[inverse]
        typed = np.concatenate([[0], np.cumsum(runs.reshape(-1))])
    dist = NeighborSampler(DistributedHops(comm, LocalHops(part.rowptr, part.col, part.lo, part.type_rowptr, t),
                                           offsets), graph.num_nodes, fanouts)
    single = NeighborSampler(LocalHops(whole_rowptr, whole_col, 0, typed, t), graph.num_nodes, fanouts)
    store = FeatureStore(part.x, part.y, part.lo, offsets, comm)
    store.build_cache(part.halo_gid[np.argsort(-part.halo_deg, kind="stable")][:cache])
    # uneven batches: rank r asks for r*7 seeds (rank 0 for none) and all ranks still take part
    for step in range(3):
        seeds = part.train_idx[:comm.rank * 7 + step]
        a, b = dist.sample(seeds, 11 + step), single.sample(seeds, 11 + step)
        assert np.array_equal(a.n_id, b.n_id) and np.array_equal(a.row, b.row) and np.array_equal(a.col, b.col)
        if hetero:
            assert np.array_equal(a.edge_type, b.edge_type)
            src_type = graph.schema.type_index  # every edge's source is of its edge type's source type
            kinds = np.searchsorted(graph.schema.offsets, inverse[a.n_id[a.row]], side="right") - 1
            want = np.array([src_type(graph.schema.edge_types[e][0]) for e in a.edge_type], dtype=np.int64)
            assert np.array_equal(kinds, want)
        x, y = store.gather(a.n_id)
        assert np.array_equal(x, graph.x[inverse[a.n_id]]), "feature rows differ"
        assert np.array_equal(y[:len(seeds)], graph.y[inverse[seeds]])
    if cache and comm.size > 1:
        assert store.cache_hits > 0
    # dependent batches: rows the previous batch brought are served here, the same rows, fewer fetched
    recent = FeatureStore(part.x, part.y, part.lo, offsets, comm)
    recent.keep_recent = True
    first = dist.sample(part.train_idx[:20], 3).n_id
    second = np.concatenate([first[::2], dist.sample(part.train_idx[20:30], 4).n_id])
    second = second[np.sort(np.unique(second, return_index=True)[1])]
    for n_id in (first, second):
        before = recent.bytes_received
        x, _ = recent.gather(n_id)
        assert np.array_equal(x, graph.x[inverse[n_id]]), "rows kept from the previous batch differ"
    remote = (second < part.lo) | (second >= part.hi)
    reused = int(np.sum(np.isin(second, first) & remote))
    assert recent.recent_hits == reused and (reused > 0 or comm.size == 1)
    fetched = int(np.sum(remote)) - reused
    if comm.size > 1:
        assert recent.bytes_received - before == fetched * part.x.shape[1] * part.x.itemsize
    if not hetero:  # LABOR: owners draw with the requester's hop seed and the sources' own variates
        dist_labor = NeighborSampler(dist.source, graph.num_nodes, fanouts, method="labor")
        single_labor = NeighborSampler(single.source, graph.num_nodes, fanouts, method="labor")
        for step in range(3):
            seeds = part.train_idx[:comm.rank * 7 + step + 3]
            a, b = dist_labor.sample(seeds, 5 + step), single_labor.sample(seeds, 5 + step)
            for key in ("n_id", "row", "col", "in_degree", "mean_over"):
                assert np.array_equal(getattr(a, key), getattr(b, key)), key
            assert len(a.mean_over) == len(a.in_degree) and np.all(a.mean_over <= np.maximum(a.in_degree, 4))
            variates = (11, labor.window(step, 4)[1])  # dependent batches: the owners rotate alike
            a, b = dist_labor.sample(seeds, 5, variates), single_labor.sample(seeds, 5, variates)
            for key in ("n_id", "row", "col", "in_degree", "mean_over"):
                assert np.array_equal(getattr(a, key), getattr(b, key)), key
            same = [NeighborSampler(s.source, graph.num_nodes, fanouts, method="labor", layer_dependency=True)
                    for s in (dist_labor, single_labor)]  # one variate per node for every hop
            a, b = same[0].sample(seeds, 7), same[1].sample(seeds, 7)
            for key in ("n_id", "row", "col", "in_degree", "mean_over"):
                assert np.array_equal(getattr(a, key), getattr(b, key)), key
            star = [NeighborSampler(s.source, graph.num_nodes, fanouts, method="labor", iterations=3)
                    for s in (dist_labor, single_labor)]  # LABOR-3: remote targets' whole neighbourhoods cross
            a, b = star[0].sample(seeds, 9), star[1].sample(seeds, 9)
            for key in ("n_id", "row", "col", "in_degree", "mean_over", "edge_weight"):
                assert np.array_equal(getattr(a, key), getattr(b, key)), key
            assert len(a.edge_weight) == len(a.row)
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1], sys.argv[2], int(sys.argv[3])))
