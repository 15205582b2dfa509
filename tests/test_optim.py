"""`training.optim.adam`: fused on the CPU, the same update as torch's default Adam (Tier 1)."""
import torch

from mpignn.training.optim import adam


def test_adam_is_fused_on_the_cpu_and_updates_as_the_default_one():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(50, 20), torch.nn.Linear(50, 20)
    b.load_state_dict(a.state_dict())
    fused, plain = adam(a.parameters(), 0.01, 5e-4), torch.optim.Adam(b.parameters(), lr=0.01, weight_decay=5e-4)
    assert fused.defaults["fused"] and not plain.defaults["fused"]
    x = torch.randn(64, 50)
    for _ in range(5):
        for model, opt in ((a, fused), (b, plain)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    plain_state = plain.state_dict()
    fused.load_state_dict(fused.state_dict())  # a checkpoint's round trip keeps it fused
    assert fused.param_groups[0]["fused"] and len(plain_state["state"]) == len(fused.state_dict()["state"])


def test_a_column_major_weight_steps_as_a_contiguous_one_and_keeps_its_layout():
    from mpignn.models.sampled import column_major

    torch.manual_seed(0)
    a, b = torch.nn.Linear(50, 20), torch.nn.Linear(50, 20)
    b.load_state_dict(a.state_dict())
    column_major(b)
    assert b.weight.stride() == (1, 20)
    opts = adam(a.parameters(), 0.01, 5e-4), adam(b.parameters(), 0.01, 5e-4)
    x = torch.randn(64, 50)
    for _ in range(3):
        for model, opt in zip((a, b), opts):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    torch.testing.assert_close(a.weight, b.weight, rtol=1e-5, atol=1e-6)
    state = opts[1].state[b.weight]
    assert b.weight.stride() == (1, 20) and state["exp_avg"].stride() == (1, 20) and b.weight.shape == (20, 50)
    assert b.weight.grad.shape == (20, 50)
