"""The remote-feature cache through the runtime API: built at start-up, sized, hit by training batches, and
serving the right rows (row-normalised ones, owner-side, with feature_norm="row"; half-precision ones, widened
to float32 in the batch, with feature_dtype fp16/bf16). Args: ROOT CASE..., each CASE CACHE_SIZE:FEATURE_NORM:
FEATURE_DTYPE, run in order in this one job; a passed case prints `MPIGNN-OK rank=R case=CASE`."""
import sys

import numpy as np

from mpignn.data import load_dataset
from mpignn.data.features import transform_rows
from mpignn.mpi import allreduce_max, allreduce_sum, run_main, world
from mpignn.runtime import bootstrap, load_local_graph, shutdown
from mpignn.training.loaders import make_loader

DATASET = "synthetic:num_nodes=3000,avg_degree=10,num_features=6"


def check(root: str, cache_size: str, feature_norm: str, feature_dtype: str) -> None:
    import torch

    rt = bootstrap(threads=1)
    graph = load_local_graph(rt, DATASET, root, fanout=[4, 3], cache_size=cache_size, feature_norm=feature_norm,
                             feature_dtype=feature_dtype)
    features = graph.features
    assert isinstance(graph.part.col, np.memmap), "the part's columns are not memory-mapped"
    assert isinstance(graph.part.x, np.memmap) == (feature_norm == "none" and feature_dtype == "fp32")
    rows = len(features.cache_gid)
    assert rows > 0 and graph.cache_rows >= rows, (rows, graph.cache_rows)
    if cache_size != "auto":
        assert rows == int(cache_size), rows  # the graph reaches far more remote nodes than this
    own = (features.cache_gid >= features.lo) & (features.cache_gid < features.hi)
    assert not own.any(), "own nodes cached"
    assert graph.cache_mib == allreduce_max(rt.comm, [features.cache_bytes / 2**20])[0] > 0
    whole = load_dataset(DATASET, root)
    assert features.row_bytes == 6 * (4 if feature_dtype == "fp32" else 2)
    expected = transform_rows(whole.x, feature_norm, "fp32")
    if feature_norm == "row":
        assert not np.allclose(expected, whole.x) and np.allclose(np.abs(expected).sum(1), 1, atol=1e-5)
    if feature_dtype != "fp32":  # what the batch holds: the rounded value, widened
        expected = torch.from_numpy(expected).to(getattr(torch, {"fp16": "float16", "bf16": "bfloat16"}[
            feature_dtype])).float().numpy()
    node_map = np.load(graph.folder / "node_map.npy")  # old id -> partition-order id
    inverse = np.empty_like(node_map)
    inverse[node_map] = np.arange(len(node_map))
    loader = make_loader(rt, graph, "train", batch_size=256)
    for batch in loader:
        assert batch.x.dtype == torch.float32
        assert np.array_equal(batch.x.numpy(), expected[inverse[batch.n_id.numpy()]]), "wrong feature rows"
    hits, remote = allreduce_sum(rt.comm, [features.cache_hits, features.remote_rows])
    assert remote > 0 and hits > 0, (hits, remote)
    print(f"case={cache_size}:{feature_norm}:{feature_dtype} cache rows={rows} hit rate={hits / remote:.3f}",
          flush=True)
    shutdown()


def main(root: str, *cases: str) -> None:
    for case in cases:
        check(root, *case.split(":"))
        print(f"MPIGNN-OK rank={world().rank} case={case}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, *sys.argv[1:]))
