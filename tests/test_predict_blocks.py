"""Blocks of exact inference (`mpignn.inference.blocks`): groups of blocks whose remote sources cross together
stay within their budget and cover every block once, and a block's source rows, assembled from the own table
and a group's fetched rows, are the rows of its sources."""
import numpy as np
import pytest

from mpignn.inference.blocks import HaloIndex, block_sources, make_block, remote_sources

LO, HI, N = 10, 20, 30  # own nodes 10..19 of a 30-node graph


def _blocks(chunk):
    rng = np.random.default_rng(0)
    degree = rng.integers(0, 6, HI - LO)
    rowptr = np.concatenate([[0], np.cumsum(degree)])
    col = np.concatenate([np.sort(rng.choice(N, d, replace=False)) for d in degree]).astype(np.int64)
    return [make_block(rowptr, col, LO, a, min(a + chunk, HI - LO)) for a in range(0, HI - LO, chunk)]


@pytest.mark.parametrize("budget", [0, 4, 8, 1000])
def test_groups_cover_every_block_once_within_the_budget(budget):
    blocks = _blocks(3)
    index = HaloIndex(blocks, LO, HI)
    groups = index.group(list(range(len(blocks))), budget)
    assert [i for g in groups for i in g] == list(range(len(blocks)))  # consecutive, each block once
    for group in groups:
        remote, _ = index.rows_of(group)
        want = np.unique(np.concatenate([remote_sources(blocks[i], LO, HI) for i in group]))
        assert np.array_equal(remote, want)
        assert len(group) == 1 or len(remote) <= budget
    if budget >= 1000:
        assert len(groups) == 1


def test_a_blocks_sources_come_from_the_own_table_and_the_groups_rows():
    rows_of_every_node = np.arange(N * 2, dtype=np.float32).reshape(N, 2)
    blocks = _blocks(4)
    index = HaloIndex(blocks, LO, HI)
    group = list(range(len(blocks)))
    remote, slot = index.rows_of(group)
    fetched = rows_of_every_node[remote]  # what the owners send
    for i in group:
        x = block_sources(blocks[i], rows_of_every_node[LO:HI], LO, fetched, slot[index.pos[i]])
        assert np.array_equal(x, rows_of_every_node[blocks[i].src_gid])
