"""`runtime.LinkNeighborLoader` on N ranks: every edge of the graph is one rank's seed once, the edges given
(the same on every rank, or each rank a chunk: PyG's per-rank split line) are trained once each, and a pass's
negatives are the ones one process drew (ROOT/one.npz, written by tests/test_link_neighbor_loader.py).
argv: ROOT."""
import sys
from pathlib import Path

import numpy as np

from mpignn.data import load_dataset
from mpignn.mpi import chunk_bounds, run_main, world
from mpignn.runtime import LinkNeighborLoader, bootstrap, load_local_graph
from user_inference import GRAPH


def epoch_record(graph, fanouts, seed, chunked=False):
    """{"positions", "negatives"} of one shuffled pass over the first 120 edges with 2 binary negatives each
    (this rank's share; negatives as rows of (position, source, target) in dataset ids)."""
    edges = load_dataset(GRAPH).edge_index()[:, :120]
    rt = graph.runtime
    if chunked:
        lo, hi = chunk_bounds(120, rt.world_size, rt.rank)
        edges = edges[:, lo:hi]
    loader = LinkNeighborLoader(graph, fanouts, edge_label_index=edges, neg_sampling={"mode": "binary", "amount": 2},
                                batch_size=16, shuffle=True, seed=seed)
    positions, negatives = [], []
    for batch in loader:
        p = len(batch.input_id)
        pairs = batch.n_id[batch.edge_label_index[:, p:]].numpy()
        positions.append(batch.input_id.numpy())
        negatives.append(np.stack([np.repeat(batch.input_id.numpy(), 2), pairs[0], pairs[1]], axis=1))
    return {"positions": np.concatenate(positions), "negatives": np.concatenate(negatives)}


RATED = ("user", "rated_by", "item")


def typed_record(graph, edges):
    """Rows (position, user, item) of one shuffled pass's binary negatives (2 each) over the first 60 edges of
    RATED (`edges`, all of them) in the heterogeneous graph `graph` (this rank's share), in the types' ids."""
    loader = LinkNeighborLoader(graph, [3, 3], edge_label_index=(RATED, edges[:, :60]), batch_size=16, shuffle=True,
                                neg_sampling={"mode": "binary", "amount": 2}, seed=7)
    rows = []
    for batch in loader:
        store, p = batch[RATED], len(batch[RATED].input_id)
        eli = store.edge_label_index[:, p:]
        rows.append(np.stack([np.repeat(store.input_id.numpy(), 2), batch["user"].n_id[eli[0]].numpy(),
                              batch["item"].n_id[eli[1]].numpy()], axis=1))
    return np.concatenate(rows)


def _sorted_rows(rows):
    return rows[np.lexsort(rows.T[::-1])]


def main(root: str) -> None:
    rt = bootstrap(threads=1)
    graph = load_local_graph(rt, GRAPH, str(Path(root) / "data"), fanout=[3, 3], cache_size=0)
    comm = rt.comm
    every = LinkNeighborLoader(graph, [3, 3], batch_size=64)
    mine = np.concatenate([b.input_id.numpy() for b in every])
    pairs = np.concatenate([b.n_id[b.edge_label_index].numpy() for b in every], axis=1)
    edges = load_dataset(GRAPH).edge_index()
    assert np.array_equal(np.sort(np.concatenate(comm.allgather(mine))), np.arange(edges.shape[1]))
    got = np.concatenate(comm.allgather(pairs), axis=1)
    assert sorted(map(tuple, got.T)) == sorted(map(tuple, edges.T)), "every edge once"
    one = np.load(Path(root) / "one.npz")
    for chunked in (False, True):
        rec = epoch_record(graph, [3, 3], seed=7, chunked=chunked)
        positions = np.concatenate(comm.allgather(rec["positions"]))
        assert np.array_equal(np.sort(positions), np.arange(120)), (chunked, np.sort(positions))
        negatives = _sorted_rows(np.concatenate(comm.allgather(rec["negatives"])))
        assert np.array_equal(negatives, _sorted_rows(one["negatives"])), "one process's negatives"
    # a heterogeneous graph: every edge of a type once over the ranks, and one process's negatives
    hetero = load_local_graph(rt, f"npz:{Path(root) / 'ui.npz'}", str(Path(root) / "data"), cache_size=0)
    typed = np.load(Path(root) / "ui.npz")["edge_index__user__rated_by__item"]
    seen = [np.stack([b["user"].n_id[b[RATED].edge_label_index[0]].numpy(),
                      b["item"].n_id[b[RATED].edge_label_index[1]].numpy()])
            for b in LinkNeighborLoader(hetero, [3, 3], edge_label_index=RATED, batch_size=64)]
    got = np.concatenate(comm.allgather(np.concatenate(seen, axis=1)), axis=1)
    assert sorted(map(tuple, got.T)) == sorted(map(tuple, typed.T)), "every edge of the type once"
    negatives = _sorted_rows(np.concatenate(comm.allgather(typed_record(hetero, typed))))
    assert np.array_equal(negatives, _sorted_rows(one["typed_negatives"])), "one process's typed negatives"
    print(f"MPIGNN-OK rank={world().rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1]))
