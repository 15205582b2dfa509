"""Tier 1: ceiling split and step padding, without MPI."""
import numpy as np
import pytest

from mpignn.mpi import ceil_split, chunk_bounds, pad_to_steps


@pytest.mark.parametrize("n,size", [(1000, 3), (2, 3), (0, 4), (7, 7), (10, 1), (5, 8)])
def test_ceil_split_exact_and_balanced(n, size):
    chunks = [np.asarray(ceil_split(np.arange(n), size, r)) for r in range(size)]
    assert np.array_equal(np.concatenate(chunks), np.arange(n))  # each item once, in order
    lengths = [len(c) for c in chunks]
    assert max(lengths) - min(lengths) <= 1
    with pytest.raises(ValueError):
        chunk_bounds(n, size, size)  # there is no chunk number `size`


def test_thousand_on_three():
    assert [len(ceil_split(1000, 3, r)) for r in range(3)] == [334, 333, 333]
    assert [chunk_bounds(2, 3, r) for r in range(3)] == [(0, 1), (1, 2), (2, 2)]


@pytest.mark.parametrize("n,size", [(1000, 3), (10, 4), (7, 2), (100, 7), (5, 3)])
def test_no_items_left_for_a_rank_that_does_not_exist(n, size):
    # The bug this replaces: split(n // size) cuts ceil(n / (n // size)) > size chunks, so the items of the
    # extra chunk belong to no rank. Here the `size` ranks' chunks tile [0, n) exactly.
    step = n // size
    assert -(-n // step) > size, "not a case where the naive split makes an extra chunk"
    bounds = [chunk_bounds(n, size, r) for r in range(size)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(prev[1] == nxt[0] for prev, nxt in zip(bounds, bounds[1:]))
    assert sum(len(ceil_split(np.arange(n), size, r)) for r in range(size)) == n


@pytest.mark.parametrize("n,steps,bs", [(10, 4, 3), (3, 5, 4), (12, 3, 4), (1, 1, 1)])
def test_pad_to_steps_covers_everything(n, steps, bs):
    idx = np.arange(n)
    batches = pad_to_steps(idx, steps, bs)
    assert len(batches) == steps
    assert all(0 < len(b) <= bs for b in batches)
    assert set(np.concatenate(batches).tolist()) == set(range(n))


def test_pad_to_steps_empty_rank_and_drop_last():
    assert [len(b) for b in pad_to_steps(np.arange(0), 3, 4)] == [0, 0, 0]
    assert [len(b) for b in pad_to_steps(np.arange(10), 2, 4, drop_last=True)] == [4, 4]
