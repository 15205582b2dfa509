"""Batch semantics across rank counts, learning-rate scaling, and the time-to-accuracy table."""
import argparse
import re

import pytest
import torch

from _mpirun import run_cli_many
from mpignn.training.loaders import rank_batch_size
from mpignn.training.schedule import attach_lr_schedule, lr_factor


@pytest.mark.parametrize("batch,world,expected", [(1024, 1, [1024]), (1024, 2, [512, 512]),
                                                  (1000, 3, [334, 333, 333]), (2, 4, [1, 1, 1, 1])])
def test_global_batch_is_cut_by_ceiling_division(batch, world, expected):
    assert [rank_batch_size(batch, world, r) for r in range(world)] == expected
    assert [rank_batch_size(batch, world, r, "rank") for r in range(world)] == [batch] * world


def test_lr_rules():
    assert lr_factor("none", 4096, 1024) == 1.0
    assert lr_factor("linear", 4096, 1024) == 4.0
    assert lr_factor("sqrt", 4096, 1024) == 2.0


def test_warmup_ramps_to_the_scaled_rate_and_resumes_mid_ramp():
    params = [torch.nn.Parameter(torch.zeros(2))]
    opt = torch.optim.SGD(params, lr=0.1)
    ramp = dict(batch_size=1, batch_scope="rank", world_size=4, steps_per_epoch=3, warmup_epochs=1.0)
    attach_lr_schedule(opt, 0.1, "linear", **ramp)
    seen = []
    for _ in range(5):
        seen.append(opt.param_groups[0]["lr"])
        params[0].grad = torch.ones(2)
        opt.step()
    assert seen == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4])
    resumed = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.3)  # a checkpoint's lr, mid-ramp
    attach_lr_schedule(resumed, 0.1, "linear", **ramp, start_step=2)
    assert resumed.param_groups[0]["lr"] == pytest.approx(0.3)
    resumed.step()
    assert resumed.param_groups[0]["lr"] == pytest.approx(0.4)
    instant = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    attach_lr_schedule(instant, 0.1, "sqrt", **{**ramp, "warmup_epochs": 0.0})
    assert instant.param_groups[0]["lr"] == pytest.approx(0.2)


def test_no_schedule_where_the_global_batch_does_not_grow():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    common = dict(batch_size=1024, steps_per_epoch=10, warmup_epochs=1.0)
    assert attach_lr_schedule(opt, 0.1, "linear", batch_scope="global", world_size=4, **common) is None
    assert attach_lr_schedule(opt, 0.1, "none", batch_scope="rank", world_size=4, **common) is None
    assert attach_lr_schedule(opt, 0.1, "linear", batch_scope="rank", world_size=4, **common) is not None
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)  # the ramp starts at --lr


@pytest.mark.mpi
def test_steps_per_epoch_on_two_ranks(tmp_path):
    """A global batch keeps the optimizer steps of one rank; a per-rank batch halves them on two."""
    args = ["mpignn.train", "--root", tmp_path, "--minibatch", "independent", "--dataset",
            "synthetic:num_nodes=4000,avg_degree=6,num_features=8", "--batch-size", "128", "--fanout", "4,4",
            "--hidden", "16", "--epochs", "1"]
    steps = {}
    for n, scopes in ((1, ["global"]), (2, ["global", "rank"])):
        runs = run_cli_many(n, {scope: [*args, "--batch-scope", scope] for scope in scopes}, tmp_path / f"out{n}")
        for scope, (codes, out) in runs.items():
            assert set(codes) == {0}, out[-3000:]
            steps[n, scope] = int(re.search(r"(\d+) train steps per epoch", out).group(1))
    assert steps == {(1, "global"): 10, (2, "global"): 10, (2, "rank"): 5}, steps  # 1200 training nodes / 128


def test_time_to_accuracy_table(capsys):
    from mpignn.bench.__main__ import _time_to_accuracy

    def recs(times, accs, per_epoch=1):
        return [{"epoch": i // per_epoch, "epochs_done": (i + 1) / per_epoch, "epoch_s": t, "val_acc": a,
                 "test_acc": a - 0.01, "seeds_per_s": 100.0} for i, (t, a) in enumerate(zip(times, accs))]

    # "two" is evaluated twice per epoch: it passes the target half-way through its second epoch
    curves = [("one", [recs([4, 4, 4], [0.5, 0.8, 0.85])]),
              ("two", [recs([1] * 6, [0.5, 0.6, 0.81, 0.79, 0.9, 0.9], 2)]), ("never", [recs([1, 1], [0.1, 0.2])])]
    args = argparse.Namespace(target_acc="auto", target_split="val", dataset="d", fanout="5", batch_size=8,
                              hidden=4, lr=0.1, precision="fp32", max_epochs=3, plot="")
    assert _time_to_accuracy(args, curves, 0.8) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "0.8000" in lines[0]
    one, two, never = lines[3].split(), lines[4].split(), lines[5].split()
    assert one[1:4] == ["yes", "8.00", "2.00"] and two[1:4] == ["yes", "3.00", "1.50"] and never[1] == "no"
    assert two[6] == "0.38"
    # several seeds: means where every seed reached the target, each seed's time, and k/n where some did not
    curves = [("one", [recs([4, 4, 4], [0.5, 0.8, 0.85]), recs([4, 4, 4], [0.5, 0.7, 0.85])]),
              ("some", [recs([1, 1], [0.9, 0.9]), recs([1, 1], [0.1, 0.2])])]
    assert _time_to_accuracy(args, curves, 0.8) == 0
    lines = capsys.readouterr().out.splitlines()
    one, some = lines[3].split(), lines[4].split()
    assert one[1:4] == ["yes", "10.00", "2.50"] and one[-1] == "8.00/12.00"
    assert some[1:3] == ["1/2", "-"] and some[-1] == "1.00/-"


@pytest.mark.parametrize("steps,k,ends", [(10, 1, [10]), (10, 4, [3, 5, 8, 10]), (3, 8, [1, 2, 3]), (0, 2, [0])])
def test_evaluations_inside_an_epoch_split_its_steps_evenly(steps, k, ends):
    from mpignn.training.fit import eval_steps

    assert eval_steps(steps, k) == ends


def test_evals_per_epoch_needs_eval_every_one():
    from _config import parse
    from mpignn.errors import ConfigError

    assert parse(["--evals-per-epoch", "4"]).evals_per_epoch == 4
    with pytest.raises(ConfigError, match=r"--evals-per-epoch 4 .* needs --eval-every 1; got --eval-every 2\. HINT"):
        parse(["--evals-per-epoch", "4", "--eval-every", "2"])
    with pytest.raises(ConfigError, match="--evals-per-epoch must be a positive int"):
        parse(["--evals-per-epoch", "0"])


def test_a_pass_can_end_inside_the_epoch_with_the_whole_pass_batches():
    from mpignn.data import make_synthetic
    from mpignn.data.synthetic import SyntheticSpec
    from mpignn.exchange import FeatureStore
    from mpignn.loader.batches import BatchLoader
    from mpignn.sampling import LocalHops, NeighborSampler

    g = make_synthetic(SyntheticSpec(num_nodes=2000, avg_degree=5, num_features=4))
    sampler = NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [3])
    loader = BatchLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 64, seed=1)
    loader.set_epoch(1)
    whole = [b.n_id.tolist() for b in loader]
    parts = []
    for a, b in [(0, 2), (2, 5), (5, None)]:
        loader.set_epoch(1, a, b)
        parts += [batch.n_id.tolist() for batch in loader]
    assert parts == whole and len(whole) > 5


def test_max_steps_takes_that_many_full_batches_of_a_fresh_shuffle():
    import numpy as np

    from mpignn.data import make_synthetic
    from mpignn.data.synthetic import SyntheticSpec
    from mpignn.exchange import FeatureStore
    from mpignn.loader.batches import BatchLoader
    from mpignn.sampling import LocalHops, NeighborSampler

    g = make_synthetic(SyntheticSpec(num_nodes=3000, avg_degree=5, num_features=4))
    sampler = NeighborSampler(LocalHops(g.rowptr, g.col), g.num_nodes, [3])
    full = BatchLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 64, seed=1)
    loader = BatchLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 64, seed=1, max_steps=3)
    assert len(full) > 3 and len(loader) == 3
    epochs = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        batches = [b.n_id[:b.batch_size].numpy() for b in loader]
        assert [len(b) for b in batches] == [64, 64, 64]
        epochs.append(np.concatenate(batches))
    assert len(np.unique(epochs[0])) == 192 and set(epochs[0]) <= set(g.train_idx.tolist())
    assert not np.array_equal(np.sort(epochs[0]), np.sort(epochs[1]))  # another shuffle, other seeds
    assert BatchLoader(sampler, FeatureStore(g.x, g.y, 0), g.train_idx, 64, max_steps=10**6).steps == len(full)


def test_negative_max_steps_is_refused_with_a_hint():
    from _config import parse
    from mpignn.errors import ConfigError

    assert parse(["--max-steps", "5"]).max_steps == 5
    with pytest.raises(ConfigError, match=r"--max-steps must be >= 0; got -1\. HINT"):
        parse(["--max-steps", "-1"])
