"""`--norm none|layer|batch`, `--residual` and `--linear-head` (issue 38 item 5): every combination trains;
batch norm alone equals torch's BatchNorm1d, and its statistics and gradients on 2 and 3 cooperative ranks
equal one process's (w:norm_step, one mpirun); exact inference equals the whole-graph forward; a run checkpoints, predicts and
refuses a resume with other values; a model or graph that cannot take them is refused in one agreed line."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from _config import parse
from _mpirun import WORKERS, run_mpi
from mpignn.data import load_dataset, make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.errors import ConfigError, is_agreed
from mpignn.models import build_model
from mpignn.models.norm import RankBatchNorm
from mpignn.sampling import LocalHops, NeighborSampler

sys.path.insert(0, str(WORKERS))
from user_inference import GRAPH, whole_forward  # noqa: E402

KINDS = ("sage", "gat", "gcn")
NORMS = ("none", "layer", "batch")


def test_rank_batch_norm_in_one_process_equals_torch_batchnorm1d():
    torch.manual_seed(0)
    x = torch.randn(37, 5) * 3 + 1
    ours, theirs = RankBatchNorm(5), torch.nn.BatchNorm1d(5)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ours.bias.uniform_(-1, 1)
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)
    grads = []
    for m in (ours, theirs):
        xi = x.clone().requires_grad_()
        out = m(xi)
        (out * torch.arange(5.0)).pow(2).sum().backward()
        grads.append((out.detach(), xi.grad, m.weight.grad, m.bias.grad, m.running_mean.clone(),
                      m.running_var.clone()))
    for a, b in zip(*grads):  # float32 sums of terms near 100: their rounding depends on the buffers' alignment
        assert torch.allclose(a, b, atol=1e-5 * max(1.0, float(b.abs().max())), rtol=1e-5), (a - b).abs().max()
    assert int(ours.num_batches_tracked) == 1
    ours.eval(), theirs.eval()
    assert torch.allclose(ours(x), theirs(x), atol=1e-5)


def test_a_step_without_rows_leaves_the_running_statistics():
    norm = RankBatchNorm(3)
    norm(torch.empty(0, 3)).sum().backward()
    assert torch.equal(norm.running_mean, torch.zeros(3)) and torch.equal(norm.running_var, torch.ones(3))
    assert int(norm.num_batches_tracked) == 0


@pytest.fixture(scope="module")
def batches():
    """Three sampled batches (3 hops) of a small synthetic graph, as SampledGNN takes them."""
    graph = make_synthetic(SyntheticSpec(num_nodes=600, avg_degree=6, num_features=8, num_classes=4))
    sampler = NeighborSampler(LocalHops(graph.rowptr, graph.col), graph.num_nodes, [4, 3, 2])
    out = []
    for step in range(3):
        seeds = graph.train_idx[step * 64:(step + 1) * 64]
        s = sampler.sample(seeds, step)
        out.append((torch.from_numpy(graph.x[s.n_id]), torch.from_numpy(np.stack([s.row, s.col])),
                    s.num_sampled_nodes, s.num_sampled_edges, torch.from_numpy(s.in_degree),
                    torch.from_numpy(graph.y[seeds])))
    return out


@pytest.mark.parametrize("residual,head", [(False, False), (True, False), (True, True)],
                         ids=["plain", "residual", "residual+head"])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("kind", KINDS)
def test_each_combination_trains_a_few_steps(batches, kind, norm, residual, head):
    torch.manual_seed(0)
    model = build_model(kind, 8, 16, 4, 3, dropout=0.3, norm=norm, residual=residual, linear_head=head)
    assert (model.norms is None) == (norm == "none") and (model.residuals is None) == (not residual)
    assert (model.head is None) == (not head)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(4):
        for x, edge_index, nodes, edges, in_degree, y in batches:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x, edge_index, nodes, edges, in_degree), y)
            loss.backward()
            assert all(p.grad is not None for p in model.parameters()), "every parameter takes part (DDP)"
            optimizer.step()
            losses.append(float(loss))
    assert np.isfinite(losses).all() and np.mean(losses[-3:]) < np.mean(losses[:3]), losses
    if norm == "batch":
        assert len(model.norms) == (3 if head else 2)
        assert all(int(m.num_batches_tracked) == 12 for m in model.norms)
        assert all(not torch.equal(m.running_mean, torch.zeros(16)) for m in model.norms)


def test_residuals_project_only_where_the_widths_differ():
    model = build_model("sage", 8, 16, 4, 3, residual=True)
    kinds = [type(r).__name__ for r in model.residuals]
    assert kinds == ["Linear", "Identity", "Linear"] and model.residuals[0].bias is None


def test_a_linear_head_keeps_every_conv_hidden_wide():
    model = build_model("gat", 8, 16, 4, 3, residual=True, norm="layer", linear_head=True)
    assert [c_out for _, c_out in model.widths] == [16, 16, 16] and len(model.norms) == 3
    assert [type(r).__name__ for r in model.residuals] == ["Linear", "Identity", "Identity"]
    assert (model.head.in_features, model.head.out_features) == (16, 4)


def test_minibatch_tune_puts_the_running_statistics_back_after_measuring(monkeypatch):
    from types import SimpleNamespace

    from mpignn.training import minibatch

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), RankBatchNorm(4))

    def measure(rt, model, loader, task, bf16):
        model.train()(torch.randn(8, 3) + 5).sum().backward()  # a measured step moves the statistics
        return minibatch.Probe(1.0, None, 0.0)

    class Loader(list):
        sampler = SimpleNamespace(close=lambda: None, cooperative=True)

    monkeypatch.setattr(minibatch, "_measure", measure)
    rt = SimpleNamespace(world_size=2, rank=0, device="cpu")
    minibatch.tune_minibatch(rt, model, lambda mode: Loader([None] * (1 + minibatch.PROBE_STEPS)), task=None)
    norm = model[1]
    assert torch.equal(norm.running_mean, torch.zeros(4)) and torch.equal(norm.running_var, torch.ones(4))
    assert int(norm.num_batches_tracked) == 0


@pytest.mark.mpi
def test_batch_norm_on_2_and_3_cooperative_ranks_equals_one_process(tmp_path):
    run_mpi("norm_step.py", 3, tmp_path, timeout=240)


@pytest.fixture(scope="module")
def graph(rt, tmp_path_factory):
    from mpignn.runtime import load_local_graph

    return load_local_graph(rt, GRAPH, str(tmp_path_factory.mktemp("norm_residual")), fanout=[3, 3], cache_size=0)


@pytest.fixture(scope="module")
def whole():
    data = load_dataset(GRAPH)
    return torch.from_numpy(data.x), torch.from_numpy(data.edge_index())


@pytest.mark.parametrize("norm,residual,head", [("layer", True, False), ("batch", True, False),
                                                ("batch", False, False), ("none", True, False),
                                                ("layer", True, True), ("batch", False, True)])
@pytest.mark.parametrize("kind", KINDS)
def test_exact_inference_equals_the_whole_graph_forward(graph, whole, kind, norm, residual, head):
    from mpignn.runtime import inference

    torch.manual_seed(0)
    model = build_model(kind, graph.num_features, 8, graph.num_classes, 3, norm=norm, residual=residual,
                        linear_head=head)
    with torch.no_grad():  # statistics and affine weights other than their start, so each shows
        for m in model.modules():
            if isinstance(m, (RankBatchNorm, torch.nn.LayerNorm)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-1, 1)
            if isinstance(m, RankBatchNorm):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
    want = whole_forward(model, *whole)[graph.node_id]
    got = inference(model.train(), graph, batch_size=37).numpy()
    assert got.shape == want.shape and np.allclose(got, want, atol=1e-5, rtol=1e-4), np.abs(got - want).max()


def _hetero_npz(tmp_path):
    from mpignn.data import save_npz
    from mpignn.data.synthetic_hetero import make_user_item

    path = tmp_path / "hetero.npz"
    save_npz(str(path), make_user_item(num_items=300, num_users=80, edges_per_item=4))
    return f"npz:{path}"


@pytest.mark.parametrize("argv,needle", [
    (["--model", "rgcn", "--norm", "batch"],
     "--model rgcn has no norm, residual or head layers; got --norm batch. HINT"),
    (["--model", "rgcn", "--residual"], "got --residual. HINT: drop --residual"),
    (["--model", "rgcn", "--linear-head"], "got --linear-head. HINT: drop --linear-head"),
    (["--norm", "group"], "--norm must be one of none, layer, batch; got 'group'. HINT"),
])
def test_a_model_without_norm_or_residual_is_refused_before_anything_runs(argv, needle):
    with pytest.raises(ConfigError) as err:
        parse(argv)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_heterogeneous_graph_is_refused_on_every_rank_alike(tmp_path):
    from mpignn import train

    args = ["--dataset", _hetero_npz(tmp_path), "--root", str(tmp_path / "data"), "--epochs", "1",
            "--threads", "1", "--norm", "layer", "--residual"]
    with pytest.raises(ConfigError) as err:
        train.main(args)
    msg = str(err.value)
    assert is_agreed(err.value) and "\n" not in msg, msg  # agreed: every rank raises it and exits, no abort
    assert msg.startswith("--norm layer and --residual applies to the models of homogeneous graphs") and \
        "HINT: drop --norm layer and --residual" in msg, msg


RUN_GRAPH = "synthetic:num_nodes=800,avg_degree=6,num_features=12,num_classes=4"


@pytest.mark.mpi
def test_a_run_checkpoints_predicts_and_refuses_a_resume_with_other_values(tmp_path):
    from _mpirun import run_cli_many
    from mpignn.predict import load
    from mpignn.predict.cli import main as predict
    from mpignn.training.checkpoint import latest_checkpoint, load_checkpoint

    train = ["mpignn.train", "--dataset", RUN_GRAPH, "--root", tmp_path / "data", "--fanout", "3,2", "--hidden",
             "16", "--batch-size", "64", "--threads", "1", "--checkpoint-dir", tmp_path / "ck"]
    runs = run_cli_many(1, {  # one process: the second run resumes (and is refused) after the first
        "first": [*train, "--epochs", "2", "--norm", "batch", "--residual", "--linear-head", "--eval", "exact"],
        "resume": [*train, "--epochs", "3", "--resume", "--norm", "layer"]}, tmp_path / "out")
    (code,), out = runs["first"]
    assert code == 0, out[-3000:]
    # python -m mpignn.predict rebuilds the model with the checkpoint's --norm, --residual and --linear-head
    assert predict(["--checkpoint-dir", str(tmp_path / "ck"), "--out", str(tmp_path / "pred"), "--threads", "1"]) == 0
    torch.manual_seed(0)
    model = build_model("sage", 12, 16, 4, 2, norm="batch", residual=True, linear_head=True)
    load_checkpoint(latest_checkpoint(tmp_path / "ck"), model)
    assert int(model.norms[0].num_batches_tracked) > 0
    data = load_dataset(RUN_GRAPH, str(tmp_path / "data"))
    want = whole_forward(model, torch.from_numpy(data.x), torch.from_numpy(data.edge_index())).argmax(-1)
    assert np.array_equal(load(tmp_path / "pred")["pred"], want)

    (code,), out = runs["resume"]
    errors = [line for line in out.splitlines() if "--resume expects" in line]
    assert code == 1 and "Traceback" not in out, out[-3000:]
    assert len(errors) == 1 and "--norm layer (checkpoint: batch), --residual False (checkpoint: True), " \
        "--linear-head False (checkpoint: True)" in errors[0] \
        and "HINT: resume with the checkpoint's flags" in errors[0], out[-3000:]
