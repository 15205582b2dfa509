"""`python -m mpignn.predict`: exact layer-wise inference (equal to PyG's convolutions over the whole graph on
1, 2 and 3 ranks), the predictions folder and its reader, and bad input."""
from __future__ import annotations

import errno
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch_geometric.nn import GCNConv
from torch_geometric.nn.models import GCN

from _mpirun import run_cli_many, run_mpi
from mpignn.errors import ConfigError, is_agreed
from mpignn.models import build_model
from mpignn.predict import load
from mpignn.inference.blocks import make_block
from mpignn.inference.layerwise import LayerStack, run_layers

GRAPH = "synthetic:num_nodes=600,avg_degree=6,num_features=12"


def _graph(n: int = 40, e: int = 160, seed: int = 0):
    """A random graph with self-loops, duplicate edges and nodes without in-edges (CSR by target)."""
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, e), rng.integers(0, n - 3, e)  # the last 3 nodes have no in-edges
    src[:5], dst[:5] = dst[:5], dst[:5]  # self-loops
    src[5:9], dst[5:9] = src[9:13], dst[9:13]  # duplicates
    order = np.argsort(dst, kind="stable")
    src, dst = src[order], dst[order]
    rowptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
    return rowptr, src.astype(np.int64), torch.from_numpy(np.stack([src, dst]))


def _pyg_layers(model, x, edge_index):
    """Each layer's rows: PyG's convolutions over the whole graph, ReLU between layers (eval mode)."""
    out, h = [x], x
    with torch.no_grad():
        for i, conv in enumerate(model.convs):
            h = conv(h, edge_index) if isinstance(conv, GCNConv) else conv((h, h), edge_index)
            h = torch.relu(h) if i < len(model.convs) - 1 else h
            out.append(h)
    return out


@pytest.mark.parametrize("kind", ["sage", "gat", "gcn"])
def test_blocks_equal_pyg_on_the_whole_graph(kind):
    torch.manual_seed(0)
    rowptr, col, edge_index = _graph()
    n = len(rowptr) - 1
    x = torch.randn(n, 5)
    model = build_model(kind, 5, 8, 3, 3).eval()
    part = SimpleNamespace(rowptr=rowptr, col=col, lo=0, hi=n, halo_gid=np.empty(0, dtype=np.int64))
    got = run_layers(None, part, LayerStack(model), x.numpy(), chunk=7, device="cpu", alltoall=None, keep=(0, 1, 2))
    want = _pyg_layers(model, x, edge_index)
    if kind == "gcn":  # PyG's GCN model with the same weights: the reference is its forward
        reference = GCN(5, 8, 3, 3).eval()
        reference.load_state_dict(model.state_dict())
        with torch.no_grad():
            assert torch.allclose(reference(x, edge_index), want[-1], atol=1e-6)
    for layer in (1, 2, 3):
        assert np.allclose(got[layer], want[layer].numpy(), atol=1e-5), (kind, layer)


def test_a_block_puts_targets_first():
    rowptr, col, _ = _graph()
    block = make_block(rowptr, col, 0, 10, 17)
    assert list(block.src_gid[:7]) == list(range(10, 17))
    assert np.array_equal(block.src_gid[block.row], col[rowptr[10]:rowptr[17]])
    assert np.array_equal(np.bincount(block.col, minlength=7), np.diff(rowptr[10:18]))


# --- the predictions folder --------------------------------------------------------------------------------

def _write(out, force_fail=None, monkeypatch=None):
    from mpi4py import MPI

    from mpignn.predict import output

    if force_fail is not None:
        real = output.save_npy
        calls = []

        def failing(path, array):
            calls.append(path)
            if len(calls) == force_fail:
                raise OSError(errno.ENOSPC, "No space left on device")
            real(path, array)
        monkeypatch.setattr(output, "save_npy", failing)
    ids = np.array([3, 0, 2, 1], dtype=np.int64)
    arrays = {"node_id": ids, "pred": ids * 10, "emb": np.arange(8, dtype=np.float32).reshape(4, 2)}
    return output.write_predictions(MPI.COMM_SELF, out, 0, 1, 4, arrays, info={"task": "node"})


def test_load_returns_original_id_order(tmp_path):
    out = _write(tmp_path / "out")
    got = load(out)
    assert list(got["node_id"]) == [0, 1, 2, 3] and list(got["pred"]) == [0, 10, 20, 30]
    assert got["emb"].tolist() == [[2, 3], [6, 7], [4, 5], [0, 1]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left


def test_a_full_disk_leaves_nothing_half_written(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="No space left.*HINT") as info:
        _write(tmp_path / "out", force_fail=2, monkeypatch=monkeypatch)
    assert is_agreed(info.value) and list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    _write(tmp_path / "out")
    before = load(tmp_path / "out")["pred"].copy()
    with pytest.raises(ConfigError, match="the old one is kept"):
        _write(tmp_path / "out", force_fail=1, monkeypatch=monkeypatch)
    assert np.array_equal(load(tmp_path / "out")["pred"], before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_load_refuses_a_folder_without_manifest(tmp_path):
    with pytest.raises(ConfigError, match="HINT"):
        load(tmp_path)


# --- on 1, 2 and 3 ranks: equal to PyG over the whole graph --------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Tiny sage, gcn, gat, sage with learnable rows and link prediction checkpoints (1 epoch, 1 rank, one
    process)."""
    base = tmp_path_factory.mktemp("predict")
    run_mpi("train_many.py", 1, base / "data", base / "ckpt", "sage=--model sage", "gcn=--model gcn",
            "gat=--model gat", "emb=--model sage --embed-dim 4", "link=--task link --decoder mlp --link-tails 5",
            timeout=120)
    return base


def _reference(base: Path, name: str) -> list[torch.Tensor]:
    """Each layer's rows, in original id order, by PyG's convolutions over the dataset's whole graph."""
    from mpignn.data import load_dataset
    from mpignn.partition import load_partition

    graph = load_dataset(GRAPH, str(base / "data"))
    n = len(graph.rowptr) - 1
    edge_index = torch.from_numpy(np.stack([np.asarray(graph.col, dtype=np.int64),
                                            np.repeat(np.arange(n), np.diff(graph.rowptr))]))
    state = torch.load(base / "ckpt" / name / "gen-000001" / "checkpoint.pt", weights_only=True)
    cfg = state["extra"]["config"]
    x = torch.from_numpy(np.asarray(graph.x, dtype=np.float32))
    if cfg["embed_dim"]:  # rank 0's learnable rows, in its part's order: back to original ids
        folder = next((base / "data" / "mpignn-parts").glob("*-1p-s0"))
        rows = np.load(base / "ckpt" / name / "gen-000001" / "embedding-rank0.npz")["weight"]
        by_id = np.empty_like(rows)
        by_id[load_partition(folder, 0).orig_id] = rows
        x = torch.cat([x, torch.from_numpy(by_id)], 1)
    model = build_model(cfg["model"], x.shape[1], cfg["hidden"], graph.num_classes, 2).eval()
    model.load_state_dict(state["model"])
    return _pyg_layers(model, x, edge_index)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [1, 2, 3])
def test_predictions_equal_pyg_on_the_whole_graph(trained, n):
    names = ["sage", "gcn", "gat"] + (["emb"] if n == 1 else [])  # learnable rows: the ranks that saved them
    run_mpi("predict_many.py", n, trained / "out", *[trained / "ckpt" / k for k in names], timeout=120)
    for name in names:
        got, want = load(trained / "out" / f"{name}-n{n}"), _reference(trained, name)
        assert np.array_equal(got["node_id"], np.arange(600))
        assert np.allclose(got["logits"], want[2].numpy(), atol=1e-5), name
        assert np.allclose(got["emb"], want[1].numpy(), atol=1e-5), name  # the last hidden layer
        assert np.array_equal(got["pred"], want[2].argmax(-1).numpy()), name


LINK_PAIRS = np.array([[0, 1], [599, 3], [5, 5], [42, 300], [7, 598]], dtype=np.int64)


@pytest.fixture(scope="module")
def two_rank_predicts(trained, tmp_path_factory):
    """`python -m mpignn.predict` on 2 ranks, one job: a folder without a checkpoint ("missing") and link
    prediction scoring some pairs ("link"); {name: (exit codes, output)} and their folder."""
    base = tmp_path_factory.mktemp("predict2")
    (base / "empty").mkdir()
    np.save(base / "pairs.npy", LINK_PAIRS.T)  # [2, P] is taken too
    runs = run_cli_many(2, {
        "missing": ["mpignn.predict", "--threads", "1", "--out", base / "missing-out", "--checkpoint-dir",
                    base / "empty"],
        "link": ["mpignn.predict", "--checkpoint-dir", trained / "ckpt" / "link", "--out", base / "link-out",
                 "--pairs", base / "pairs.npy", "--threads", "1", "--chunk-size", "2"]}, base / "out", timeout=180)
    return base, runs


@pytest.mark.mpi
def test_bad_input_fails_on_every_rank_with_one_line(two_rank_predicts):
    base, runs = two_rank_predicts
    codes, text = runs["missing"]
    ranks = re.findall(r"mpignn: error: \[rank (\d)\] [^\n]*?expected a checkpoint[^\n]*?HINT: train with", text)
    assert 0 not in codes and sorted(ranks) == ["0", "1"], text
    assert not (base / "missing-out").exists()


@pytest.mark.mpi
def test_each_bad_input_fails_alike_on_every_rank_in_one_process(trained, tmp_path):
    """One bootstrap and shutdown per case: rank 0 used to stop the rendezvous store's thread at shutdown while
    rank 1 could still be waiting for a key inside init_process_group, and the next case hung (about one run in
    six here), and rank 0 could tear its gloo group down while rank 1 still connected. The store now serves
    until every rank said goodbye (tests/mpi_workers/mpi_store.py) and init_process_group ends with a barrier."""
    run_mpi("predict_bad.py", 2, trained, tmp_path, timeout=120)


@pytest.mark.mpi
def test_link_prediction_writes_embeddings_and_scores_pairs(trained, two_rank_predicts):
    base, runs = two_rank_predicts
    pairs = LINK_PAIRS
    codes, text = runs["link"]
    assert codes == [0, 0], text[-3000:]
    got = load(base / "link-out")
    assert "pred" not in got and got["emb"].shape == (600, 16)  # the encoder's output: what the decoder scores
    state = torch.load(trained / "ckpt" / "link" / "gen-000001" / "checkpoint.pt", weights_only=True)["model"]
    mlp = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    mlp.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("mlp.")})
    emb = torch.from_numpy(np.asarray(got["emb"]))
    with torch.no_grad():
        want = mlp(emb[pairs[:, 0]] * emb[pairs[:, 1]]).squeeze(-1).numpy()
    assert np.allclose(got["pair_score"], want, atol=1e-5)
