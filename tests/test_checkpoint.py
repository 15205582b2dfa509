"""Checkpoint contents: per-rank RNG states restore exactly, flag checks on resume (a resume with other model
flags fails with one line naming them, not inside torch's load_state_dict), weights_only-safe files."""
import re

import pytest
import torch

from mpignn.training.checkpoint import (FORMAT, check_compatible, load_checkpoint, rng_state, set_rng_state)
from mpignn.errors import ConfigError
from mpignn.tasks import make_task


def test_rng_rows_of_a_saved_checkpoint_restore_each_ranks_stream(tmp_path):
    states = []
    for rank in range(2):
        torch.manual_seed(100 + rank)
        torch.rand(7)
        states.append(rng_state())
    expected = [None, None]
    for rank in range(2):
        set_rng_state(states[rank])
        expected[rank] = torch.rand(5)
    model = torch.nn.Linear(3, 2)
    stacked = {"cpu": torch.stack([s["cpu"] for s in states])}
    torch.save({"format": FORMAT, "epoch": 4, "step": 9, "model": model.state_dict(), "rng": stacked,
                "optimizer": torch.optim.Adam(model.parameters()).state_dict(), "extra": {"best": {"epoch": 2}}},
               tmp_path / "checkpoint.pt")  # a generation's file, as save_state writes it
    info = load_checkpoint(tmp_path, model)
    assert (info["epoch"], info["step"], info["extra"]["best"]["epoch"]) == (4, 9, 2)
    for rank in (1, 0):  # row 1 is a view at a storage offset: it must not crash nor read row 0
        set_rng_state({"cpu": info["rng"]["cpu"][rank]})
        assert torch.equal(torch.rand(5), expected[rank])


def test_first_format_checkpoints_are_refused_with_the_fix(tmp_path):
    model = torch.nn.Linear(3, 2)
    torch.save({"epoch": 3, "model": model.state_dict(), "optimizer": torch.optim.Adam(model.parameters())
                .state_dict(), "extra": {}}, tmp_path / "checkpoint.pt")
    with pytest.raises(ConfigError, match=r"checkpoint format 1; this mpignn reads format 2\. HINT: another "):
        load_checkpoint(tmp_path, model)


@pytest.mark.parametrize("extra", [{"config": ["hidden", 64]}, ["config"]])
def test_a_saved_config_that_is_not_a_dict_is_a_file_of_another_model(tmp_path, extra):
    model = torch.nn.Linear(3, 2)
    torch.save({"format": FORMAT, "epoch": 1, "step": 0, "model": model.state_dict(), "extra": extra},
               tmp_path / "checkpoint.pt")
    with pytest.raises(ConfigError, match=r"cannot resume from .*checkpoint\.pt: .*HINT: the file is from another "
                                          "model/flags"):
        load_checkpoint(tmp_path, model, config={"hidden": 64})


def test_resume_refuses_another_model_shape_and_names_replay_changes():
    saved = {"dataset": "Cora", "model": "sage", "hidden": 64, "fanout": "10,10", "lr": 0.01, "seed": 0}
    assert check_compatible(saved, {**saved, "epochs": 9}) == []
    assert check_compatible(saved, {**saved, "lr": 0.1}) == ["--lr 0.1 (checkpoint: 0.01)"]
    sampled = {**saved, "eval": "sampled"}  # the scores that choose the best epoch: sampled (and full) or exact
    assert check_compatible(sampled, {**sampled, "eval": "full"}) == []
    assert check_compatible(sampled, {**sampled, "eval": "exact"}) == [
        "--eval exact (checkpoint: sampled; the best epoch so far was chosen by other scores)"]
    with pytest.raises(ConfigError, match=r"got --hidden 32 \(checkpoint: 64\), --fanout 5,5 \(checkpoint: "
                                          r"10,10\)\. HINT: resume with the checkpoint's flags"):
        check_compatible(saved, {**saved, "hidden": 32, "fanout": "5,5"})


@pytest.mark.parametrize("flag, value", [("dataset", "PubMed"), ("task", "node"), ("model", "gcn"), ("hidden", 32),
                                         ("fanout", "10,10,10"), ("embed_dim", 8), ("decoder", "mlp")])
def test_resume_refuses_each_flag_the_weights_shapes_depend_on(flag, value):
    link = {"dataset": "Cora", "task": "link", "decoder": "dot", "model": "sage", "hidden": 64, "fanout": "10,10",
            "embed_dim": 0, "lr": 0.01}
    named = f"--{flag.replace('_', '-')} {value} (checkpoint: {link[flag]})"
    with pytest.raises(ConfigError, match=f"^--resume expects the model flags of the checkpoint; got "
                                          f"{re.escape(named)}\\. HINT: "):
        check_compatible(link, {**link, flag: value}, make_task(name="link").model_flags)


def test_a_node_resume_ignores_the_decoder_a_node_classifier_does_not_have():
    node = {"dataset": "Cora", "task": "node", "decoder": "dot", "model": "sage", "hidden": 64, "fanout": "10,10"}
    assert check_compatible(node, {**node, "decoder": "mlp"}, make_task(name="node").model_flags) == []


# A link run: its model has the most flags (the encoder's and the decoder's); 1 rank, no mpiexec.
SMALL_LINK = ["--dataset", "synthetic:num_nodes=500,avg_degree=4,num_features=8", "--task", "link", "--hidden", "8",
              "--fanout", "3,3", "--batch-size", "256"]


REFUSED = [
    (["--decoder", "mlp"], "--decoder mlp (checkpoint: dot)"),
    (["--task", "node"], "--task node (checkpoint: link)"),
    (["--fanout", "3,3,3"], "--fanout 3,3,3 (checkpoint: 3,3)"),  # one layer more
]


@pytest.fixture(scope="module")
def refused_resumes(tmp_path_factory):
    """One epoch of SMALL_LINK into ck/, then a resume with each of REFUSED's flags: {named: (codes, output)},
    the runs in one process (`run_cli_many` on one rank)."""
    from _mpirun import run_cli_many

    folder = tmp_path_factory.mktemp("link-run")
    train = ["mpignn.train", "--root", folder / "data", "--checkpoint-dir", folder / "ck", *SMALL_LINK]
    cases = {"first": [*train, "--epochs", "1"],
             **{named: [*train, "--epochs", "2", "--resume", *flags] for flags, named in REFUSED}}
    runs = run_cli_many(1, cases, folder / "out")
    assert runs["first"][0] == [0], runs["first"][1][-3000:]
    return runs


@pytest.mark.mpi
@pytest.mark.parametrize("named", [named for _, named in REFUSED])
def test_resume_with_other_model_flags_fails_with_one_line_naming_them(refused_resumes, named):
    (code,), out = refused_resumes[named]
    errors = [line for line in out.splitlines() if "--resume expects" in line]
    assert code == 1 and "Traceback" not in out, out[-3000:]
    assert len(errors) == 1 and named in errors[0] and "HINT: resume with the checkpoint's flags" in errors[0], \
        out[-3000:]


def test_a_checkpoint_older_than_norm_and_residual_held_a_model_without_them():
    """Its config lacks the flags: a resume with them on is refused in one line, not inside torch's load."""
    old = {"dataset": "Cora", "model": "sage", "hidden": 64, "fanout": "10,10"}
    assert check_compatible(old, {**old, "norm": "none", "residual": False}) == []
    with pytest.raises(ConfigError, match=r"got --norm batch \(checkpoint: none\), --residual True \(checkpoint: "
                                          r"False\)\. HINT"):
        check_compatible(old, {**old, "norm": "batch", "residual": True})
