"""2 ranks, argv: NPZ DIR. Rank 0's Data arrives (in many chunks) as the parts NPZ gives by name, and trains; a bad Data
(DIR/*.npz), None on rank 0, a name and a graph, rank 0 failing while it partitions: one error on every rank."""
import sys
from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from mpignn.data import load_dataset
from mpignn.errors import ConfigError, DatasetError
from mpignn.mpi import RootFailedError, run_main
from mpignn.partition import memory
from mpignn.partition.format import HETERO_FILES, PART_FILES
from mpignn.runtime import bootstrap, load_local_graph
from mpignn.training.loaders import make_loader


def data_of(path):  # the npz's arrays as a PyG Data, the splits as boolean masks
    a = {k: torch.from_numpy(v) for k, v in np.load(path).items()}
    masks = {k[:-4] + "_mask": torch.isin(torch.arange(len(a["x"])), v) for k, v in a.items() if k.endswith("_idx")}
    return Data(x=a["x"], y=a["y"], edge_index=a["edge_index"], num_classes=int(a["num_classes"]), **masks)


def refused(rt, error, dataset, needle):
    try:
        load_local_graph(rt, dataset, cache_size=0)
        raise AssertionError(f"{needle} not refused")
    except error as exc:
        assert needle in str(exc), (str(exc), needle)
        print(f"rank {rt.rank} refused alike: {exc}", flush=True)


def main() -> None:
    rt = bootstrap(logging_setup=False)
    npz, folder = sys.argv[1], Path(sys.argv[2])
    memory.CHUNK_BYTES = 1000  # many messages per array
    for extra in ({"replicated": True}, {}):
        opts = dict(partition_method="metis", seed=5, fanout=[4, 4], cache_size=50, **extra)
        mem = load_local_graph(rt, data_of(npz) if rt.rank == 0 else None, **opts)
        named = load_local_graph(rt, f"npz:{npz}", str(folder), **opts)
        for name in PART_FILES + HETERO_FILES:
            assert np.array_equal(np.asarray(getattr(mem.part, name)), np.asarray(getattr(named.part, name))), name
    model = torch.nn.Linear(mem.num_features, mem.num_classes)
    for b in make_loader(rt, mem, "train", batch_size=64):  # batches train
        torch.nn.functional.cross_entropy(model(b.x[:b.batch_size]), b.y[:b.batch_size]).backward()
    for bad in sorted(folder.glob("*.npz")):
        try:
            load_dataset(f"npz:{bad}")
        except DatasetError as exc:
            refused(rt, DatasetError, data_of(bad) if rt.rank == 0 else None, str(exc).removeprefix(f"{bad}: "))
    refused(rt, ConfigError, None, "expected rank 0 to pass a dataset name or a torch_geometric Data")
    refused(rt, ConfigError, f"npz:{npz}" if rt.rank == 0 else data_of(npz), "expected the dataset name")
    memory.parts_in_memory = lambda *a, **k: 1 / 0
    refused(rt, (ZeroDivisionError, RootFailedError), data_of(npz) if rt.rank == 0 else None, "division by zero")
    print(f"MPIGNN-OK rank={rt.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main))
