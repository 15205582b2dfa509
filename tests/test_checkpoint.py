"""Checkpoint contents: per-rank RNG states restore exactly, flag checks on resume, weights_only-safe files."""
import pytest
import torch

from mpignn.checkpoint import (check_compatible, load_checkpoint, rng_state, save_checkpoint, set_rng_state)
from mpignn.errors import ConfigError


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
    save_checkpoint(tmp_path, 4, model, torch.optim.Adam(model.parameters()), {"best": {"epoch": 2}}, step=9,
                    rng=stacked)
    info = load_checkpoint(tmp_path, model)
    assert (info["epoch"], info["step"], info["extra"]["best"]["epoch"]) == (4, 9, 2)
    for rank in (1, 0):  # row 1 is a view at a storage offset: it must not crash nor read row 0
        set_rng_state({"cpu": info["rng"]["cpu"][rank]})
        assert torch.equal(torch.rand(5), expected[rank])


def test_first_format_checkpoints_continue_after_their_epoch(tmp_path):
    model = torch.nn.Linear(3, 2)
    torch.save({"epoch": 3, "model": model.state_dict(), "optimizer": torch.optim.Adam(model.parameters())
                .state_dict(), "extra": {}}, tmp_path / "checkpoint.pt")
    info = load_checkpoint(tmp_path, model)
    assert (info["epoch"], info["step"], info["rng"]) == (4, 0, {})


def test_resume_refuses_another_model_shape_and_names_replay_changes():
    saved = {"dataset": "Cora", "model": "sage", "hidden": 64, "fanout": "10,10", "lr": 0.01, "seed": 0}
    assert check_compatible(saved, {**saved, "epochs": 9}) == []
    assert check_compatible(saved, {**saved, "lr": 0.1}) == ["--lr 0.1 (checkpoint: 0.01)"]
    with pytest.raises(ConfigError, match=r"got --hidden 32 \(checkpoint: 64\), --fanout 5,5 \(checkpoint: "
                                          r"10,10\)\. HINT: resume with the checkpoint's flags"):
        check_compatible(saved, {**saved, "hidden": 32, "fanout": "5,5"})
