"""2 ranks: NeighborLoader batches hold the dataset's rows and labels under dataset ids across parts; uneven seeds give
equal steps; accuracy/mean weigh items, not ranks; its cooperative and full-graph batches are the CLI loader's."""
import sys

import numpy as np
import torch

from mpignn.data import load_dataset
from mpignn.mpi import run_main
from mpignn.runtime import NeighborLoader, accuracy, bootstrap, load_local_graph, mean

SMALL = "synthetic:num_nodes=1500,avg_degree=6,num_features=4"


def main() -> None:
    rt = bootstrap(logging_setup=False)
    graph = load_local_graph(rt, SMALL, sys.argv[1], cache_size=0, feature_norm="none")
    data = load_dataset(SMALL)
    loader = NeighborLoader(graph, [4, 4], input_nodes=None, batch_size=50)
    remote = 0
    for batch in loader:
        n_id = batch.n_id.numpy()
        assert np.allclose(batch.x.numpy(), np.asarray(data.x)[n_id])
        assert np.array_equal(batch.y.numpy(), np.asarray(data.y)[n_id])  # other ranks' nodes too (read -1)
        assert set(batch.n_id[:batch.batch_size].numpy()) <= set(graph.node_id.tolist())  # seeds are own nodes
        assert np.array_equal(batch.input_id.numpy(), batch.n_id[:batch.batch_size].numpy())  # None: ids
        remote += int((~np.isin(n_id, graph.node_id)).sum())
    assert remote > 0  # ids of other ranks' nodes were looked up too
    # PyG's per-rank line: each rank a chunk of the split, holding other ranks' nodes; the chunks together train
    # (each rank kept only the part of its chunk it owns: about half the split went untrained)
    train = torch.from_numpy(np.flatnonzero(np.isin(np.arange(data.num_nodes), np.asarray(data.train_idx))))
    split = graph.get_idx_split()  # OGB's: each split whole on every rank, though each rank holds its own part
    assert set(split) == {"train", "valid", "test"} and torch.equal(split["train"], train)
    assert torch.equal(split["test"], torch.from_numpy(np.sort(np.asarray(data.test_idx))))
    chunk = train.split(-(-len(train) // rt.world_size))[rt.rank]
    seeds, positions = 0, []
    for b in NeighborLoader(graph, [2], input_nodes=chunk, batch_size=64):
        seeds += b.batch_size  # input_id: positions in the chunks joined in rank order, the split PyG cut
        assert np.array_equal(train[b.input_id].numpy(), b.n_id[:b.batch_size].numpy())
        positions.append(b.input_id.numpy())
    assert rt.comm.allreduce(seeds) == len(train), (rt.comm.allreduce(seeds), len(train))
    assert sorted(np.concatenate(rt.comm.allgather(np.concatenate(positions)))) == list(range(len(train)))
    whole = NeighborLoader(graph, [2], input_nodes=train, batch_size=64)
    every = [int(b.input_id.max()) for b in whole if b.batch_size]
    assert max(rt.comm.allgather(max(every, default=-1))) == len(train) - 1  # one list on every rank: its places
    # batch_size is per process (PyG's meaning); batch_scope="global" shares it out over the ranks
    for scope, seeds in (("rank", 40), ("global", 20)):
        loader = NeighborLoader(graph, [2], input_nodes=None, batch_size=40, batch_scope=scope, prefetch="off")
        assert next(iter(loader)).batch_size == seeds and len(loader) == -(-len(graph.node_id) // seeds)
    # rank 0 gets 1 seed, rank 1 three: equal steps; without shuffle rank 0's surplus steps are empty
    ids = torch.tensor(graph.node_id[:1 if rt.rank == 0 else 3])
    loader = NeighborLoader(graph, [2], input_nodes=ids, batch_size=1)
    batches = list(loader)
    sizes, scales = [b.batch_size for b in batches], [b.loss_scale for b in batches]
    assert len(sizes) == 3 and sum(sizes) == len(ids), sizes
    # steps hold 1+1, 0+1 and 0+1 seeds: world size x mine / all, so DDP's average weighs every seed alike
    assert scales == ([1.0, 0.0, 0.0] if rt.rank == 0 else [1.0, 2.0, 2.0]), scales
    # 1 of 1 right on rank 0, 0 of 3 on rank 1: 0.25 over items (averaging the ranks' accuracies says 0.5)
    acc = accuracy(rt, torch.tensor([1] * len(ids)), torch.tensor([1] if rt.rank == 0 else [0, 0, 0]))
    assert acc == 0.25 and mean(rt, 2.0 * len(ids), len(ids)) == 2.0
    # minibatch: the training CLI's modes, batch for batch what its own loader gives (seeds, draws, rows)
    from mpignn.training.loaders import make_loader

    for mode in ("cooperative", "full"):
        ours = NeighborLoader(graph, [3, 2], input_nodes="train", batch_size=64, shuffle=True, batch_scope="global",
                              prefetch="off", minibatch=mode)
        cli = make_loader(rt, graph, "train", [3, 2], batch_size=64, prefetch="off", minibatch=mode)
        assert len(ours) == len(cli) and (mode != "full" or len(ours) == 1), (mode, len(ours), len(cli))
        for a, b in zip(ours, cli):
            assert torch.equal(a.part_n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index), mode
            k = a.batch_size  # (x has room the halo fills while the model runs: not compared)
            assert k == b.batch_size and torch.equal(a.y[:k], b.y[:k]) and a.halo is not None, mode
    print(f"MPIGNN-OK rank={rt.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main))
