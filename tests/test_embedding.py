"""Learnable node embeddings: the start by global id, the sparse optimizers against torch's, save and load,
and the distributed rows against one process (MPI workers)."""
import numpy as np
import pytest
import torch

from _mpirun import run_mpi, run_python
from mpignn.exchange.embedding import NodeEmbedding, init_rows


def test_rows_start_by_global_id_whatever_the_split():
    whole = init_rows(7, 0, 200_000, 3, scale=0.5)
    assert np.array_equal(np.concatenate([init_rows(7, 0, 70_001, 3, 0.5), init_rows(7, 70_001, 129_999, 3, 0.5)]),
                          whole)
    assert -0.5 <= whole.min() < -0.49 and 0.49 < whole.max() < 0.5 and abs(whole.mean()) < 0.01
    assert not np.array_equal(init_rows(8, 0, 10, 3), init_rows(7, 0, 10, 3))


@pytest.mark.parametrize("name", ["adagrad", "adam"])
def test_sparse_updates_equal_torch_sparse_optimizers(name):
    emb = NodeEmbedding(30, 5, optimizer=name, lr=0.05, seed=1)
    ref = torch.nn.Embedding(30, 5, sparse=True)
    ref.weight.data = torch.from_numpy(emb.weight.copy())
    opt = (torch.optim.Adagrad(ref.parameters(), lr=0.05) if name == "adagrad"
           else torch.optim.SparseAdam(ref.parameters(), lr=0.05))
    rng = np.random.default_rng(0)
    for _ in range(5):
        ids = rng.integers(0, 20, size=12)  # repeats included; rows 20..29 never touched
        coef = torch.from_numpy(rng.standard_normal((12, 5)).astype(np.float32))
        (emb.pull(ids) * coef).sum().backward()
        emb.step()
        opt.zero_grad()
        (ref(torch.from_numpy(ids)) * coef).sum().backward()
        opt.step()
    assert np.allclose(emb.weight, ref.weight.detach().numpy(), atol=1e-6)


def test_save_and_load_round_trip_and_refuse_other_rows(tmp_path):
    emb = NodeEmbedding(10, 3, lo=5, optimizer="adam")
    (emb.pull(np.array([5, 7])) ** 2).sum().backward()
    emb.step()
    emb.save(tmp_path / "emb.npz")
    back = NodeEmbedding(10, 3, lo=5, optimizer="adam", seed=9)
    back.load(tmp_path / "emb.npz")
    assert np.array_equal(back.weight, emb.weight) and back.optimizer.steps == 1
    assert np.array_equal(back.optimizer.m, emb.optimizer.m)
    with pytest.raises(ValueError, match="rows from 5 of shape .*HINT"):
        NodeEmbedding(10, 3, lo=0).load(tmp_path / "emb.npz")
    with pytest.raises(RuntimeError, match="without a pull"):
        back.step()


@pytest.mark.mpi
@pytest.mark.parametrize("n,optimizer", [(2, "adagrad"), (3, "adam")])
def test_distributed_rows_train_as_one_process(n, optimizer):
    run_mpi("embedding.py", n, optimizer, timeout=120)


@pytest.mark.mpi
def test_train_with_learnable_rows_checkpoints_and_resumes_them(tmp_path):
    """--embed-dim on 2 ranks: rows travel (bytes in the metrics), each rank checkpoints its rows, a resumed
    run ends with the rows and weights of the uninterrupted one, and another world size is refused."""
    import json

    from _mpirun import run_cli_many
    from mpignn.training.checkpoint import latest_checkpoint

    args = ["--root", str(tmp_path), "--dataset", "synthetic:num_nodes=2000,avg_degree=6,num_features=4",
            "--hidden", "16", "--batch-size", "128", "--fanout", "4,4", "--embed-dim", "8"]

    def train(folder, *extra):
        return ["mpignn.train", *args, "--checkpoint-dir", tmp_path / folder, *extra]

    runs = run_cli_many(2, {"full": train("full", "--epochs", "2", "--metrics-out", tmp_path / "m.jsonl"),
                            "stopped": train("ck", "--epochs", "1"),
                            "resumed": train("ck", "--epochs", "2", "--resume")}, tmp_path / "out")
    for codes, out in runs.values():
        assert codes == [0, 0], out[-3000:]
    recs = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert len(recs) == 2 and all(r["embedding_bytes"] > 0 for r in recs)
    for rank in (0, 1):
        a, b = (np.load(latest_checkpoint(tmp_path / d) / f"embedding-rank{rank}.npz") for d in ("full", "ck"))
        assert np.array_equal(a["weight"], b["weight"]) and np.array_equal(a["sum"], b["sum"])
        assert int(a["tag_epoch"]) == 2 and not np.array_equal(a["weight"], NodeEmbedding(
            len(a["weight"]), 8, lo=int(a["lo"])).weight), "rows never trained"
    full, ck = (torch.load(latest_checkpoint(tmp_path / d) / "checkpoint.pt", weights_only=True)["model"]
                for d in ("full", "ck"))
    assert all(torch.equal(full[k], ck[k]) for k in full)
    code, out = run_python(3, ["-m", *train("ck", "--epochs", "3", "--resume")], timeout=150)
    assert code == 1, out[-3000:]
    assert "HINT" in out and out.count("embedding-rank") + out.count("learnable rows") >= 1, out[-2000:]


def test_embed_flags_are_checked_before_anything_runs():
    from _config import parse
    from mpignn.errors import ConfigError

    assert parse(["--embed-dim", "16"]).embed_dim == 16
    with pytest.raises(ConfigError, match="--embed-dim must be >= 0 and --embed-lr positive; got -1.*HINT"):
        parse(["--embed-dim", "-1"])
    with pytest.raises(ConfigError, match="--replicated has no owners. HINT"):
        parse(["--embed-dim", "8", "--replicated"])
