"""The torch-op sampling kernels (issue 41 item 1) draw what the numba kernels draw, bit for bit, so
`--sample-on device` never changes what trains: on random CSRs (fanouts above, below and at the degree, all
neighbours, one fanout per edge type; LABOR-i's iterations with saturated sources and targets of 2048 edges and
more), through `DeviceHops` for homogeneous and heterogeneous rows, and a CLI run's losses on 1 and 2 ranks,
every mini-batch mode."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mpignn.sampling import LocalHops, kernels, labor, torch_kernels
from mpignn.sampling.device_hops import DeviceHops

FANOUTS = [[-1], [5], [3, 7], [15], [1], [0], [2, -1, 4]]


def _random_csr(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    deg = rng.integers(0, 40, int(rng.integers(1, 300)))
    rowptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    return rowptr, rng.integers(0, 10 ** 12, int(rowptr[-1])).astype(np.int64)  # global ids far beyond 2**32


@pytest.mark.parametrize("trial", range(len(FANOUTS) * 3))
def test_the_torch_kernels_draw_the_numba_kernels_draws_bit_for_bit(trial):
    rng = np.random.default_rng(trial)
    rowptr, col = _random_csr(rng)
    rows = rng.integers(0, len(rowptr) - 1, int(rng.integers(0, 200))).astype(np.int64)
    gids = rows + int(rng.integers(0, 10 ** 9))
    fanouts = np.array(FANOUTS[trial % len(FANOUTS)], dtype=np.int64)
    seed = int(rng.integers(0, 2 ** 63)) if trial % 2 else int(rng.integers(0, 2 ** 20))
    t = torch.from_numpy
    counts, nbrs = torch_kernels.sample_rows(t(rowptr), t(col), t(rows), t(gids), t(fanouts), seed)
    want_counts, want_nbrs = kernels.sample_rows(rowptr, col, rows, gids, fanouts, seed)
    assert np.array_equal(counts.numpy(), want_counts) and np.array_equal(nbrs.numpy(), want_nbrs)
    shift = labor.window(trial, 3)[1]  # dependent batches rotate the variates: in integers, so bit for bit
    drawn = torch_kernels.labor_rows(t(rowptr), t(col), t(rows), t(fanouts), seed, shift)
    for got, want in zip(drawn, labor.labor_rows(rowptr, col, rows, fanouts, seed, shift)):
        assert np.array_equal(got.numpy(), want)
    assert int(counts.sum()) == len(nbrs)


def test_device_hops_answer_as_local_hops_do_also_per_edge_type():
    rng = np.random.default_rng(5)
    rowptr, col = _random_csr(rng)
    n = len(rowptr) - 1
    gids = np.sort(rng.choice(n, size=min(n, 50), replace=False)).astype(np.int64) + 1000
    host, device = LocalHops(rowptr, col, lo=1000), DeviceHops(rowptr, col, lo=1000)
    for fanout in (4, -1):
        for got, want in zip(device.sample(gids, fanout, 7), host.sample(gids, fanout, 7)):
            assert np.array_equal(got, want)
        for got, want in zip(device.sample_labor(gids, fanout, 7), host.sample_labor(gids, fanout, 7)):
            assert np.array_equal(got, want)
    # Two edge types: each (node, type) a row of type_rowptr with its own fanout and stream.
    types = 2
    typed = np.concatenate([[0], np.cumsum(rng.integers(0, 9, n * types))]).astype(np.int64)
    tcol = rng.integers(0, 10 ** 6, int(typed[-1])).astype(np.int64)
    plain = np.arange(0, len(typed), types, dtype=np.int64)
    host = LocalHops(typed[plain], tcol, 1000, typed, types)
    device = DeviceHops(typed[plain], tcol, 1000, typed, types)
    for got, want in zip(device.sample(gids, [3, -1], 11), host.sample(gids, [3, -1], 11)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("fanout", [5, 15, -1])
def test_labor_iterations_in_torch_ops_are_the_numba_kernels_bit_for_bit(fanout):
    rng = np.random.default_rng(fanout + 7)
    deg = rng.integers(0, 300, 400)
    deg[:4] = [2047, 2048, 2049, 5000]  # the fixed-point sums drop a bit from 2048 edges on
    rowptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    nbrs = rng.integers(0, 3000, int(rowptr[-1])).astype(np.int64)  # shared sources: their weights rise
    t = torch.from_numpy
    for iterations in (0, 1, 3):
        for normalise in (True, False):
            want = labor.labor_importance(rowptr, nbrs, fanout, 99, 5 << 40, iterations, normalise=normalise)
            got = torch_kernels.labor_importance(t(deg), t(nbrs), fanout, 99, 5 << 40, iterations, normalise)
            for a, b in zip(got, want):
                assert a.numpy().dtype == b.dtype and np.array_equal(a.numpy(), b)
    # the sequential steps over sorted weights ran: some targets' sources saturate after the iterations
    sources, inverse = np.unique(nbrs, return_inverse=True)
    edge_of = torch.repeat_interleave(torch.arange(len(deg)), t(deg))
    pi = torch.rand(len(sources), dtype=torch.float64, generator=torch.Generator().manual_seed(0)) ** 4
    scale = torch_kernels.importance_scales(edge_of, t(deg), t(inverse), pi, fanout)
    host = labor.importance_scales(rowptr, inverse.astype(np.int64), pi.numpy(), fanout)
    assert np.array_equal(scale.numpy(), host)
    top = torch.zeros(len(deg), dtype=torch.float64).scatter_reduce_(0, edge_of, pi[t(inverse)], "amax")
    assert fanout < 0 or bool(((scale * top >= 1) & (t(deg) > fanout)).any())


def _losses(path) -> list[float]:
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("sampler", ["neighbor", "labor", "labor --labor-iterations 2"])
def test_a_run_sampled_on_the_device_writes_the_same_losses(tmp_path, sampler):
    from mpignn import train

    losses = {}
    for where in ("host", "device"):
        out = tmp_path / f"{where}.jsonl"
        assert train.main(["--dataset", "synthetic:num_nodes=2000,avg_degree=12,num_features=8,num_classes=4",
                           "--root", str(tmp_path / "data"), "--epochs", "2", "--threads", "1", "--fanout", "6,4",
                           "--hidden", "16", "--batch-size", "256", "--minibatch", "independent", "--sampler",
                           *sampler.split(), "--sample-on", where, "--metrics-out", str(out)]) == 0
        losses[where] = _losses(out)
    assert losses["device"] == losses["host"] and len(losses["host"]) == 2


@pytest.fixture(scope="module")
def two_rank_runs(tmp_path_factory):
    from _mpirun import train_runs

    base = tmp_path_factory.mktemp("sample_on")
    runs = {f"{mode}-{where}": ["--minibatch", mode, "--sample-on", where]
            for mode in ("independent", "cooperative") for where in ("host", "device")}
    return base, train_runs(2, base, ["--root", base / "data", "--dataset",
                                      "synthetic:num_nodes=3000,avg_degree=10,num_features=8,num_classes=4",
                                      "--epochs", "2", "--fanout", "5,5", "--hidden", "16", "--batch-size", "128"],
                            runs)


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["independent", "cooperative"])
def test_two_ranks_sampled_on_the_device_write_the_same_losses(two_rank_runs, mode):
    from _mpirun import records

    losses = {where: [r["loss"] for r in records(*two_rank_runs, f"{mode}-{where}")[0]] for where in ("host", "device")}
    assert losses["device"] == losses["host"] and len(losses["host"]) == 2
