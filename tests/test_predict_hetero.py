"""`python -m mpignn.predict` and `--eval exact` on heterogeneous graphs: every node type's rows by exact
layer-wise inference equal one process applying the same trained weights with PyG's `HeteroConv` to the whole
graph (a `HeteroData`), on 1, 2 and 3 ranks, for --model sage, rgcn and learnable rows of the featureless type;
the per-type predictions folder and its reader."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from _mpirun import run_mpi, run_python
from mpignn.data import load_dataset, save_npz
from mpignn.data.hetero import type_rowptr
from mpignn.data.synthetic_hetero import make_user_item
from mpignn.errors import ConfigError
from mpignn.models import build_model
from mpignn.predict import load
from mpignn.inference.layerwise import LayerStack, own_inputs, run_layers

SIZE = {"num_items": 600, "num_users": 150, "edges_per_item": 6}


def _whole_graph(graph, x: dict[str, torch.Tensor]):
    """The dataset's whole graph as PyG's HeteroData: per type `x`, per edge type `edge_index` in type ids."""
    from torch_geometric.data import HeteroData

    schema, offsets = graph.schema, graph.schema.offsets
    data = HeteroData()
    for t in schema.node_types:
        data[t].x = x[t]
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.rowptr))
    for e, (s, r, d) in enumerate(schema.edge_types):
        keep = graph.edge_type == e
        src_ids = np.asarray(graph.col, dtype=np.int64)[keep] - offsets[schema.type_index(s)]
        data[s, r, d].edge_index = torch.from_numpy(np.stack([src_ids, dst[keep] - offsets[schema.type_index(d)]]))
    return data


def _heteroconv_layers(model, data) -> list[dict[str, torch.Tensor]]:
    """Each layer's rows per node type: PyG's HeteroConv (sum over edge types) of the model's convs over the whole
    graph, plus its roots (rgcn), ReLU between layers (eval mode)."""
    from torch_geometric.nn import HeteroConv

    x, out = data.x_dict, [data.x_dict]
    with torch.no_grad():
        for layer in range(model.num_layers):
            convs = {tuple(k.split("__")): c for k, c in model.convs[layer].items()}
            h = HeteroConv(convs, aggr="sum")(x, data.edge_index_dict)
            for t, root in model.roots[layer].items():
                h[t] = h[t] + root(x[t]) if t in h else root(x[t])
            x = {t: torch.relu(v) for t, v in h.items()} if layer < model.num_layers - 1 else h
            out.append(x)
    return out


@pytest.mark.filterwarnings("ignore:There exist node types")
@pytest.mark.parametrize("kind", ["sage", "rgcn"])
def test_blocks_equal_heteroconv_on_the_whole_graph(kind):
    """One process, a part holding the whole graph, chunks of 37 targets (some blocks end at a type's end)."""
    torch.manual_seed(0)
    graph = make_user_item(num_items=300, num_users=80, edges_per_item=5)
    schema = graph.schema
    model = build_model(kind, {"item": 16, "user": 1}, 8, 4, 2, schema=schema).eval()
    meta = SimpleNamespace(hetero=schema.to_json(), parts=[{"type_counts": list(schema.node_counts)}])
    part = SimpleNamespace(meta=meta, part_id=0, rowptr=graph.rowptr, col=graph.col, lo=0, hi=graph.num_nodes,
                           x=graph.x, type_rowptr=type_rowptr(graph.rowptr, graph.edge_type, schema.num_etypes),
                           halo_gid=np.empty(0, dtype=np.int64))
    got = run_layers(None, part, LayerStack(model), own_inputs(part), chunk=37, device="cpu", alltoall=None,
                     keep=(0, 1))
    items = slice(0, 300)
    x = {"item": torch.from_numpy(graph.x[items, :16]), "user": torch.ones(80, 1)}  # users: featureless
    want = _heteroconv_layers(model, _whole_graph(graph, x))
    assert np.array_equal(got[0][300:], np.c_[np.ones(80), np.zeros((80, 15))])  # the constant input column
    for t, rows in (("item", items), ("user", slice(300, 380))):
        assert np.allclose(got[1][rows], want[1][t].numpy(), atol=1e-5), (kind, t)
    assert np.allclose(got[2][items], want[2]["item"].numpy(), atol=1e-5), kind
    assert not got[2][300:].any()  # the last layer outputs the classified type only


def test_an_unknown_model_is_refused_with_a_hint():
    with pytest.raises(ConfigError, match="sage or rgcn.*HINT"):
        LayerStack(torch.nn.Linear(2, 2))


# --- the per-type predictions folder ----------------------------------------------------------------------

def _write(out, arrays):
    from mpi4py import MPI

    from mpignn.predict import output

    return output.write_predictions(MPI.COMM_SELF, out, 0, 1, 5, arrays, info={"task": "node"},
                                    node_types={"item": 3, "user": 2})


def test_load_returns_each_type_in_its_original_id_order(tmp_path):
    item = {"node_id": np.array([2, 0, 1]), "pred": np.array([20, 0, 10]), "emb": np.eye(3, dtype=np.float32)}
    user = {"node_id": np.array([1, 0]), "emb": np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], dtype=np.float32)}
    got = load(_write(tmp_path / "out", {"item": item, "user": user}))
    assert sorted(got) == ["item", "user"] and sorted(got["user"]) == ["emb", "node_id"]
    assert got["item"]["pred"].tolist() == [0, 10, 20] and got["item"]["emb"][2].tolist() == [1, 0, 0]
    assert got["user"]["emb"].tolist() == [[0, 0, 0], [1, 1, 1]]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["node_types"]["user"]["folder"] == "type-1" and manifest["parts"] == [{"part": 0, "rows": 5}]
    assert sorted(p.name for p in (tmp_path / "out" / "part-000").iterdir()) == ["type-0", "type-1"]
    manifest["node_types"]["user"]["folder"] = "../elsewhere"  # the reader stays inside OUT
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="type-K.*HINT"):
        load(tmp_path / "out")


# --- on 1, 2 and 3 ranks: equal to HeteroConv over the whole graph -------------------------------------------

@pytest.fixture(scope="module")
def graph_dir(tmp_path_factory):
    """A folder with the user-item graph (items classified, users featureless) as ui.npz, and data/ (its
    partitions)."""
    base = tmp_path_factory.mktemp("predict_hetero")
    save_npz(str(base / "ui.npz"), make_user_item(**SIZE))
    return base


@pytest.fixture(scope="module")
def trained(graph_dir):
    """Tiny sage and rgcn checkpoints of the graph (1 epoch, 1 rank) under ckpt/; the runs with learnable rows
    are trained by each prediction job on its own ranks."""
    dataset = f"npz:{graph_dir / 'ui.npz'}"
    run_mpi("train_many.py", 1, graph_dir / "data", graph_dir / "ckpt", f"sage=--dataset {dataset} --model sage",
            f"rgcn=--dataset {dataset} --model rgcn", timeout=150)
    return graph_dir


def _user_rows(base: Path, ckpt: Path, ranks: int, users: slice) -> torch.Tensor:
    """The users' learnable rows in their original order, from each rank's saved rows and its part's ids."""
    from mpignn.partition import load_partition

    folder = next((base / "data" / "mpignn-parts").glob(f"*-{ranks}p-s0"))
    gen = max(ckpt.glob("gen-*"))
    pieces = [(load_partition(folder, r).orig_id, np.load(gen / f"embedding-rank{r}.npz")["weight"])
              for r in range(ranks)]
    by_id = np.empty((sum(len(i) for i, _ in pieces), pieces[0][1].shape[1]), dtype=np.float32)
    for ids, rows in pieces:
        by_id[ids] = rows
    return torch.from_numpy(by_id[users])


def _reference(base: Path, ckpt: Path, ranks: int) -> list[dict[str, torch.Tensor]]:
    """Each layer's rows per node type, in the types' original id order, by HeteroConv over the whole graph."""
    graph = load_dataset(f"npz:{base / 'ui.npz'}", str(base / "data"))
    schema, offsets = graph.schema, graph.schema.offsets
    state = torch.load(max(ckpt.glob("gen-*")) / "checkpoint.pt", weights_only=True)
    cfg = state["extra"]["config"]
    items, users = (slice(int(offsets[k]), int(offsets[k + 1])) for k in (0, 1))
    x = {"item": torch.from_numpy(np.asarray(graph.x[items, :schema.feature_dims[0]], dtype=np.float32)),
         "user": (_user_rows(base, ckpt, ranks, users) if cfg["embed_dim"]
                  else torch.ones(users.stop - users.start, 1))}
    model = build_model(cfg["model"], {t: v.shape[1] for t, v in x.items()}, cfg["hidden"], graph.num_classes,
                        len(str(cfg["fanout"]).split(",")), schema=schema).eval()
    model.load_state_dict(state["model"])
    return _heteroconv_layers(model, _whole_graph(graph, x))


@pytest.mark.mpi
@pytest.mark.filterwarnings("ignore:There exist node types")
@pytest.mark.parametrize("n", [1, 2, 3])
def test_predictions_equal_heteroconv_on_the_whole_graph(trained, n):
    run_mpi("predict_hetero.py", n, f"npz:{trained / 'ui.npz'}", trained / "data", trained,
            trained / "ckpt" / "sage", trained / "ckpt" / "rgcn", timeout=180)
    for name, ckpt, ranks in (("sage", "sage", 1), ("rgcn", "rgcn", 1), ("emb", f"emb-n{n}", n)):
        got, want = load(trained / "out" / f"{name}-n{n}"), _reference(trained, trained / "ckpt" / ckpt, ranks)
        assert sorted(got) == ["item", "user"], name
        item, user = got["item"], got["user"]
        assert np.array_equal(item["node_id"], np.arange(SIZE["num_items"]))
        assert np.array_equal(user["node_id"], np.arange(SIZE["num_users"]))
        assert np.allclose(item["logits"], want[2]["item"].numpy(), atol=1e-5), name
        assert np.array_equal(item["pred"], want[2]["item"].argmax(-1).numpy()), name
        for t in ("item", "user"):  # the last hidden layer: both types have rows there
            assert np.allclose(got[t]["emb"], want[1][t].numpy(), atol=1e-5), (name, t)
        assert "logits" not in user and "pred" not in user  # only the classified type has outputs


# --- --eval exact -----------------------------------------------------------------------------------------

def _eval_args(base, tmp_path):
    return ["--dataset", f"npz:{base / 'ui.npz'}", "--root", str(base / "data"), "--epochs", "1",
            "--fanout", "4,3", "--hidden", "16", "--batch-size", "128", "--threads", "1", "--model", "rgcn",
            "--eval", "exact", "--checkpoint-dir", str(tmp_path / "ck"), "--metrics-out", str(tmp_path / "m.jsonl")]


def _check_exact_scores(base, tmp_path):
    """The last epoch's val_acc / test_acc equal the accuracy of the items' predicted classes of the same
    checkpoint (`python -m mpignn.predict` on 1 rank)."""
    from mpignn.predict.cli import main as predict

    last = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[-1])
    assert predict(["--checkpoint-dir", str(tmp_path / "ck"), "--out", str(tmp_path / "pred"), "--threads", "1"]) == 0
    pred = load(tmp_path / "pred")["item"]["pred"]
    graph = load_dataset(f"npz:{base / 'ui.npz'}", str(base / "data"))
    want = [float((pred[idx] == graph.y[idx]).mean()) for idx in (graph.val_idx, graph.test_idx)]  # items first
    assert [last["val_acc"], last["test_acc"]] == pytest.approx(want, abs=1e-12)
    return last


def test_eval_exact_scores_the_classified_type(graph_dir, tmp_path):
    from mpignn import train

    assert train.main(_eval_args(graph_dir, tmp_path)) == 0
    _check_exact_scores(graph_dir, tmp_path)


@pytest.mark.mpi
def test_two_ranks_eval_exact_equals_one_rank_predictions_of_their_weights(graph_dir, tmp_path):
    rc, out = run_python(2, ["-m", "mpignn.train", *_eval_args(graph_dir, tmp_path)], timeout=180)
    assert rc == 0, out[-3000:]
    assert _check_exact_scores(graph_dir, tmp_path)["world_size"] == 2
