"""The fused activation + halo of cooperative batches (`mpignn.models.dropout.activated_halo`) equals ReLU +
dropout followed by the plain halo's `torch.cat`: the same table and the same gradient, with and without dropout."""
import numpy as np
import pytest
import torch

from mpignn.exchange.halo import Halo
from mpignn.models.dropout import activated_halo, relu_dropout
from mpignn.sampling.cooperative import LayerPlan


class _Loopback:
    """A transport of one rank that sends rows to itself: what it is sent comes back."""

    halo_bytes = 0

    def rows(self, raw, send_counts, recv_counts, pieces=None):
        assert list(send_counts) == list(recv_counts)
        return raw.clone()


@pytest.mark.parametrize("p, training", [(0.0, True), (0.5, True), (0.5, False)])
def test_activated_halo_equals_activation_then_halo(p, training):
    plan = LayerPlan(src=np.array([0, 5, 2, 6, 4]), send_idx=np.array([3, 1]), send_counts=np.array([2]),
                     recv_counts=np.array([2]), n_own=5)
    transport = _Loopback()
    halo = Halo([plan], transport, transport)
    x = torch.randn(5, 7, dtype=torch.float64)
    weight = torch.randn(7, 7, dtype=torch.float64)
    results = []
    for fused in (True, False):
        torch.manual_seed(1)
        leaf = x.clone().requires_grad_()
        pre = leaf * 1.0  # a fresh tensor, as a layer's output is
        if fused:
            table, src = activated_halo(halo, 0, pre, p, training)
        else:
            table, src = halo(0, relu_dropout(pre, p, training))
        (table @ weight).square().sum().backward()
        results.append((table.detach(), src, leaf.grad))
    (table, src, grad), (want, want_src, want_grad) = results
    torch.testing.assert_close(table, want, rtol=0, atol=0)
    assert torch.equal(table[5:], table[[3, 1]]) and torch.equal(src, want_src)
    torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-12)
    assert transport.halo_bytes == 4 * 2 * 7 * 8  # both runs: 2 rows of 7 float64 forward, their gradients back


def test_a_plan_of_other_rows_is_refused():
    plan = LayerPlan(src=np.zeros(0, dtype=np.int64), send_idx=np.zeros(0, dtype=np.int64),
                     send_counts=np.zeros(1, dtype=np.int64), recv_counts=np.zeros(1, dtype=np.int64), n_own=4)
    with pytest.raises(ValueError, match="got 3 own rows; its plan has 4"):
        activated_halo(Halo([plan], _Loopback(), _Loopback()), 0, torch.zeros(3, 2), 0.0, True)
