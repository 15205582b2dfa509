"""--norm batch and layer with --residual (batch with --linear-head too): one cooperative step on all ranks, and on ranks 0-1 alone, equals one
process on the global batch (loss, every gradient summed over the ranks, the batch norms' running statistics),
for SAGE, GAT and GCN. Batch norm all-reduces over its group. argv: folder."""
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coop_step import grads, whole_graph  # noqa: E402

from mpignn.data import make_synthetic  # noqa: E402
from mpignn.data.synthetic import SyntheticSpec  # noqa: E402
from mpignn.exchange.alltoall import MpiAlltoall  # noqa: E402
from mpignn.exchange.halo import Halo  # noqa: E402
from mpignn.models.norm import RankBatchNorm  # noqa: E402
from mpignn.models.sampled import SampledGNN  # noqa: E402
from mpignn.mpi import run_main, world  # noqa: E402
from mpignn.partition import load_partition, partition_graph  # noqa: E402
from mpignn.runtime import bootstrap  # noqa: E402
from mpignn.sampling import LocalHops, NeighborSampler  # noqa: E402
from mpignn.sampling.cooperative import CooperativeSampler  # noqa: E402

FANOUTS = [5, 4, 3]


def run(kind, norm, head, group, x, edge_index, out, labels, total, halo=None):
    """One step's (loss, gradients, running statistics) of a fresh model with its batch norms over `group`."""
    torch.manual_seed(0)
    model = SampledGNN(kind, 6, 16, 4, len(FANOUTS), norm=norm, residual=True, linear_head=head)
    for m in model.modules():
        if isinstance(m, RankBatchNorm):
            m.group = group
    logits = model(x, torch.from_numpy(edge_index), out.num_sampled_nodes, out.num_sampled_edges,
                   torch.from_numpy(out.in_degree), halo=halo)
    loss = F.cross_entropy(logits, labels, reduction="sum") / total
    loss.backward()
    stats = [b.numpy().ravel() for n, b in model.named_buffers() if "running" in n]
    return float(loss.detach()), grads(model), np.concatenate(stats or [np.zeros(1)])


def case(comm, group, solo, folder, graph):
    if comm.rank == 0:
        partition_graph(graph, comm.size, folder, method="metis", seed=1, force=True)
    comm.Barrier()
    part = load_partition(folder, comm.rank)
    rowptr, col, x_all, y_all = whole_graph(graph, np.load(f"{folder}/node_map.npy"))
    sampler = CooperativeSampler(comm.Dup(), LocalHops(part.rowptr, part.col, part.lo),
                                 np.asarray(part.meta.part_offsets), FANOUTS, MpiAlltoall(comm.Dup()))
    single = NeighborSampler(LocalHops(rowptr, col), graph.num_nodes, FANOUTS)
    seeds = part.train_idx[:30 + 17 * comm.rank]
    out = sampler.sample(seeds, 7)
    all_seeds = np.concatenate(comm.allgather(seeds))
    ref = single.sample(all_seeds, 7)
    for kind in ("sage", "gat", "gcn"):
        for norm, head in (("batch", True), ("layer", False)):
            halo = Halo(out.halo, sampler.rows, sampler)
            loss, grad, stats = run(kind, norm, head, group, torch.from_numpy(x_all[out.n_id]),
                                    np.stack([out.row, out.col]), out,
                                    torch.from_numpy(y_all[out.n_id[:len(seeds)]]), len(all_seeds), halo)
            want = run(kind, norm, head, solo, torch.from_numpy(x_all[ref.n_id]), np.stack([ref.row, ref.col]), ref,
                       torch.from_numpy(y_all[all_seeds]), len(all_seeds))
            assert abs(comm.allreduce(loss) - want[0]) < 1e-5, (comm.size, kind, norm, loss, want[0])
            diff = np.abs(comm.allreduce(grad) - want[1]).max()
            assert diff < 1e-5, (comm.size, kind, norm, diff)
            assert np.abs(stats - want[2]).max() < 1e-5, (comm.size, kind, norm, "running statistics")
    sampler.close()


def main(folder: str) -> None:
    bootstrap(threads=1)  # torch.distributed (gloo): the batch norms' all-reduce
    comm = world()
    graph = make_synthetic(SyntheticSpec(num_nodes=2000, avg_degree=8, num_features=6, num_classes=4))
    solo = [dist.new_group([r]) for r in range(comm.size)][comm.rank]  # one process: statistics of its rows
    pair = dist.new_group([0, 1])
    case(comm, None, solo, f"{folder}/all", graph)
    sub = comm.Split(int(comm.rank >= 2), comm.rank)
    if comm.rank < 2:
        case(sub, pair, solo, f"{folder}/pair", graph)
    comm.Barrier()
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1]))
