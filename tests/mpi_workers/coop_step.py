"""One cooperative step on N ranks equals one process training the same global batch with the same sampled
neighbourhoods: the rows of each depth (each node once, all ranks together), the loss and every parameter's
gradient (summed over ranks, as DDP's all-reduce does up to its 1/N), for SAGE, GAT and GCN, and for SAGE on
layer-neighbour (LABOR-0, and LABOR-3 with its edge weights: each source's weight a maximum over every rank's
targets) batches, with a rank that has no seeds; and dependent batches that keep the input rows the batch before
brought (`KeptInputs`). argv: folder."""
import sys

import numpy as np
import torch
import torch.nn.functional as F

from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.exchange.alltoall import MpiAlltoall
from mpignn.exchange.halo import Halo
from mpignn.models.sampled import SampledGNN
from mpignn.mpi import collectives, run_main, world
from mpignn.partition import load_partition, partition_graph
from mpignn.sampling import LocalHops, NeighborSampler
from mpignn.sampling.cooperative import CooperativeSampler
from mpignn.sampling.labor import window

FANOUTS = [5, 4, 3]


def whole_graph(graph, node_map):
    """The whole graph's CSR in the partition's ids (the reference process's graph)."""
    inverse = np.empty_like(node_map)
    inverse[node_map] = np.arange(len(node_map))
    rowptr = np.zeros(graph.num_nodes + 1, dtype=np.int64)
    np.cumsum(np.diff(graph.rowptr)[inverse], out=rowptr[1:])
    col = np.concatenate([node_map[graph.col[graph.rowptr[o]:graph.rowptr[o + 1]]] for o in inverse])
    return rowptr, col, graph.x[inverse], graph.y[inverse]


def grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()


def check_step(comm, kind, sampler, single, seeds, seed, data, variates=None, room=False, out=None):
    """One cooperative step of `sampler` on this rank's `seeds` equals `single`'s process on every rank's:
    the rows of each depth, the loss and the summed gradients. -> (this rank's batch, the reference's).
    `room`: the input rows come with room for the remote ones (as the loader gives them on the CPU); `out`: the
    batch, drawn before."""
    x_all, y_all = data
    out = sampler.sample(seeds, seed, variates) if out is None else out
    all_seeds = np.concatenate(comm.allgather(seeds))
    ref = single.sample(all_seeds, seed, variates)
    depths = np.sum(comm.allgather(np.asarray(out.num_sampled_nodes)), axis=0)
    assert depths.tolist() == ref.num_sampled_nodes, (depths, ref.num_sampled_nodes)
    ids = np.sort(np.concatenate(comm.allgather(out.n_id)))
    assert np.array_equal(ids, np.sort(ref.n_id)), "the ranks' rows are not the batch's nodes once"
    mean_over = lambda b: None if b.mean_over is None else torch.from_numpy(b.mean_over)  # noqa: E731
    weight = lambda b: None if b.edge_weight is None else torch.from_numpy(b.edge_weight)  # noqa: E731

    torch.manual_seed(0)
    model = SampledGNN(kind, 6, 16, 4, len(FANOUTS))
    halo = Halo(out.halo, sampler.rows, sampler, keeper=sampler if sampler.keep_inputs else None)
    x = torch.from_numpy(x_all[out.n_id])  # own rows only: the rest crosses by the halo
    if room:
        x = torch.cat([x, torch.full((halo.table_rows(0) - len(x), x.shape[1]), float("nan"), dtype=x.dtype)])
    edge_index = torch.from_numpy(np.stack([out.row, out.col]))
    logits = model(x, edge_index, out.num_sampled_nodes, out.num_sampled_edges, torch.from_numpy(out.in_degree),
                   halo=halo, mean_over=mean_over(out), edge_weight=weight(out))
    labels = torch.from_numpy(y_all[out.n_id[:len(seeds)]])
    loss = F.cross_entropy(logits, labels, reduction="sum") / len(all_seeds)
    loss.backward()
    loss_sum = comm.allreduce(float(loss.detach()))
    grad_sum = comm.allreduce(grads(model))

    torch.manual_seed(0)
    model = SampledGNN(kind, 6, 16, 4, len(FANOUTS))
    logits = model(torch.from_numpy(x_all[ref.n_id]), torch.from_numpy(np.stack([ref.row, ref.col])),
                   ref.num_sampled_nodes, ref.num_sampled_edges, torch.from_numpy(ref.in_degree),
                   mean_over=mean_over(ref), edge_weight=weight(ref))
    loss = F.cross_entropy(logits, torch.from_numpy(y_all[all_seeds]), reduction="sum") / len(all_seeds)
    loss.backward()
    ref_loss = float(loss.detach())
    assert abs(loss_sum - ref_loss) < 1e-5, (kind, seed, loss_sum, ref_loss)
    diff = np.abs(grad_sum - grads(model)).max()
    assert diff < 1e-5, (kind, seed, diff)
    return out, ref


# the pairs one cooperative step is checked on; `few`: one per path the rank count changes (neighbour and
# LABOR-3 draws, their exchanges, a kept-inputs window), for jobs of many ranks on this 2-core machine
PAIRS = (("sage", "neighbor"), ("gat", "neighbor"), ("gcn", "neighbor"), ("sage", "labor"), ("gat", "labor"),
         ("gcn", "labor"), ("sage", "labor3"), ("gcn", "labor3"))
FEW = (("sage", "neighbor"), ("gcn", "labor3"))


def main(folder: str, few: bool = False) -> None:
    comm = world()
    graph = make_synthetic(SyntheticSpec(num_nodes=3000, avg_degree=8, num_features=6, num_classes=4))
    if comm.rank == 0:
        partition_graph(graph, comm.size, folder, method="metis", seed=1, force=True)
    comm.Barrier()
    part = load_partition(folder, comm.rank)
    offsets = np.asarray(part.meta.part_offsets)
    rowptr, col, x_all, y_all = whole_graph(graph, np.load(f"{folder}/node_map.npy"))
    data = (x_all, y_all)
    kinds = {"neighbor": ("neighbor", 0), "labor": ("labor", 0), "labor3": ("labor", 3)}
    samplers = {name: CooperativeSampler(comm.Dup(), LocalHops(part.rowptr, part.col, part.lo), offsets, FANOUTS,
                                         MpiAlltoall(comm.Dup()), method=method, iterations=iterations)
                for name, (method, iterations) in kinds.items()}
    singles = {name: NeighborSampler(LocalHops(rowptr, col), graph.num_nodes, FANOUTS, method=method,
                                     iterations=iterations) for name, (method, iterations) in kinds.items()}
    # layer-neighbour sampling (SAGE's mean and GCN's degrees count min(d, k)): owners draw with shared variates
    pairs = FEW if few else PAIRS
    for kind, method in pairs:
        for step in range(2):
            # step 1: every exchange in pieces of at most 7 rows (MAX_COUNT lowered), as huge batches would go
            collectives.MAX_COUNT = 7 if step == 1 else 2**31 - 1
            # uneven shares, the last rank none at step 0: it still samples, exchanges and backpropagates
            share = 0 if (step == 0 and comm.rank == comm.size - 1) else 40 + 13 * comm.rank
            seeds = part.train_idx[:share] if step == 0 else part.train_idx[-share:]
            out, ref = check_step(comm, kind, samplers[method], singles[method], seeds, 100 + step, data)
            assert all(plan.pieces == (step == 1) for plan in out.halo)
    assert ref.edge_weight is not None and (ref.edge_weight != 1).any()  # LABOR-3's weights were in play
    collectives.MAX_COUNT = 2**31 - 1
    # Dependent batches (windows of 4 steps) keeping the input rows the batch before brought: the same steps.
    # Step 1 is drawn but never trained (a batch prefetched at a pass's end), so step 2, the next pass's first,
    # takes step 0's rows; step 3 is drawn before step 2 trains (prefetch) and takes step 2's. GCN scales its
    # input rows for each batch: it keeps none. SAGE's rows come with room for the remote ones, GAT's without (a
    # table made in the halo, as on a GPU).
    for kind in ("sage",) if few else ("sage", "gat", "gcn"):
        keeper = CooperativeSampler(comm.Dup(), LocalHops(part.rowptr, part.col, part.lo), offsets, FANOUTS,
                                    MpiAlltoall(comm.Dup()), method="labor", dependency=4, keep_inputs=True)
        seeds = lambda step: part.train_idx[5 * step:5 * step + 30 + 7 * comm.rank]  # noqa: E731 (overlapping)
        variates = lambda step: (7, window(step, 4)[1])  # noqa: E731
        draw = lambda step: keeper.sample(seeds(step), 200 + step, variates(step))  # noqa: E731
        check = lambda step, out: check_step(comm, kind, keeper, singles["labor"], seeds(step),  # noqa: E731
                                             200 + step, data, variates(step), kind == "sage", out)
        check(0, draw(0))
        draw(1)
        keeper.new_pass()
        second, third = draw(2), draw(3)
        assert third.halo[0].kept.recent is second.halo[0].kept
        check(2, second)
        check(3, third)
        kept = comm.allreduce(keeper.kept_rows)
        assert (kept > 0) == (kind != "gcn") and keeper.kept_rows <= keeper.input_rows, (kind, kept)
        if kind != "gcn":
            assert comm.allreduce(keeper.input_rows) > 0
    assert all(samplers[method].halo_bytes > 0 for _, method in pairs)
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1]))
