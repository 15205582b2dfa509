"""The remote-feature cache: the access estimate that ranks nodes, the budget, and --cache-size parsing.

The estimate runs on MPI.COMM_SELF (one part holding the whole graph; the same code runs on several ranks in
tests/test_cache_mpi.py)."""
import numpy as np
import pytest

from _config import parse
from mpignn.config.choices import parse_cache_size
from mpignn.config.train_config import TrainConfig
from mpignn.env import mem_available_bytes
from mpignn.errors import ConfigError


def _self_comm():
    from mpi4py import MPI

    return MPI.COMM_SELF


def _csr(num_nodes, edges):
    """CSR of in-neighbours from (target, source) pairs."""
    edges = sorted(edges)
    rowptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.add.at(rowptr, np.array([t for t, _ in edges]) + 1, 1)
    return np.cumsum(rowptr), np.array([s for _, s in edges], dtype=np.int64)


def _estimate(rowptr, col, seeds, fanouts, batch_size):
    from mpignn.sampling.access import access_frequency
    from mpignn.sampling.neighbor import LocalHops

    n = len(rowptr) - 1
    ids, freq = access_frequency(_self_comm(), LocalHops(rowptr, col), np.array([0, n]), np.asarray(seeds),
                                 fanouts, batch_size)
    full = np.zeros(n)
    full[ids] = freq
    return full


def test_a_node_on_more_sampled_paths_ranks_higher():
    # seeds 0, 1, 2 (degree 2 each, fanout 1: each neighbour drawn with probability 1/2);
    # node 10 neighbours all three seeds, node 11 only seed 0, node 12 seed 1 and node 13 nobody.
    edges = [(0, 10), (0, 11), (1, 10), (1, 12), (2, 10), (2, 14)]
    rowptr, col = _csr(15, edges)
    freq = _estimate(rowptr, col, [0, 1, 2], [1], batch_size=3)
    assert freq[10] > freq[11] > 0 and freq[11] == pytest.approx(freq[12]) and freq[13] == 0
    # one batch of 3 seeds: node 10 is drawn with probability 1 - (1/2)^3 = 0.875; Poisson gives 1 - e^-1.5
    assert freq[10] == pytest.approx(1 - np.exp(-1.5))
    # a second hop reaches beyond: 20 -> 10 (10's only in-neighbour), so 20 is fetched as often as 10 is visited
    rowptr, col = _csr(21, [*edges, (10, 20)])
    two = _estimate(rowptr, col, [0, 1, 2], [1, 1], batch_size=3)
    assert two[20] == pytest.approx(1 - np.exp(-1.5)) and two[20] > two[11]


def test_the_estimate_follows_what_sampling_fetches():
    from mpignn.sampling import kernels
    from mpignn.sampling.neighbor import LocalHops, NeighborSampler

    rng = np.random.default_rng(0)
    n = 3000
    # skewed degrees: sources drawn by a power law, so some nodes are sampled far more often than others
    src = (rng.pareto(1.5, 30_000) * 50).astype(np.int64) % n
    dst = rng.integers(0, n, 30_000)
    rowptr, col = _csr(n, list(zip(dst.tolist(), src.tolist())))
    seeds = rng.choice(n, 600, replace=False)
    fanouts, batch = [5, 3], 100
    est = _estimate(rowptr, col, seeds, fanouts, batch)
    sampler = NeighborSampler(LocalHops(rowptr, col), n, fanouts)
    seen = np.zeros(n)
    epochs = 30
    for epoch in range(epochs):
        order = seeds[rng.permutation(len(seeds))]
        for step in range(0, len(order), batch):
            seen[sampler.sample(order[step:step + batch], kernels.mix_seed(epoch, step)).n_id] += 1
    seen[seeds] -= epochs  # seeds are fetched once per epoch by construction; the estimate counts hops >= 1
    seen /= epochs
    reached = (seen > 0) | (est > 0)
    assert np.corrcoef(est[reached], seen[reached])[0, 1] > 0.9
    assert 0.8 < est.sum() / seen.sum() < 1.25
    top, rest = np.argsort(-est)[:300], np.argsort(-est)[300:]
    assert seen[top].mean() > 10 * seen[rest].mean()


def test_budget_respects_the_memory_share_and_the_row_cap():
    from mpignn.exchange.cache_policy import AUTO_CACHE_FALLBACK_ROWS, AUTO_CACHE_MEMORY_SHARE, cache_budget

    gib = 2**30
    # auto: a quarter of 8 GiB over 4 ranks, in 400-byte rows, when enough nodes are worth it
    rows = cache_budget("auto", 400, reachable=10**8, worth=10**8, spare_bytes=8 * gib, ranks_sharing=4)
    assert rows == int(AUTO_CACHE_MEMORY_SHARE * 8 * gib / 4) // 400
    assert rows * 400 <= AUTO_CACHE_MEMORY_SHARE * 8 * gib / 4
    # more ranks on the host: each gets less
    assert cache_budget("auto", 400, 10**8, 10**8, 8 * gib, 8) < rows
    # capped by the remote nodes worth caching
    assert cache_budget("auto", 400, reachable=5000, worth=1234, spare_bytes=8 * gib, ranks_sharing=4) == 1234
    # memory unknown: the fallback count, still capped
    assert cache_budget("auto", 400, 10**6, 10**6, None, 1) == AUTO_CACHE_FALLBACK_ROWS
    assert cache_budget("auto", 400, 10**6, 10, None, 1) == 10
    # no memory to spare: no cache
    assert cache_budget("auto", 400, 10**6, 10**6, 0, 2) == 0
    # a row count is taken as given, but never beyond the nodes sampling can reach
    assert cache_budget(50_000, 400, reachable=10**6, worth=10, spare_bytes=1, ranks_sharing=1) == 50_000
    assert cache_budget(50_000, 400, reachable=700, worth=10, spare_bytes=1, ranks_sharing=1) == 700
    assert cache_budget(0, 400, 10**6, 10**6, 8 * gib, 1) == 0


def test_cache_size_is_auto_by_default_and_takes_row_counts():
    assert TrainConfig().cache_size == "auto"
    assert parse([]).cache_size == "auto"
    assert parse(["--cache-size", "auto"]).cache_size == "auto"
    assert parse(["--cache-size", "50000"]).cache_size == 50_000
    assert parse(["--cache-size", "0"]).cache_size == 0
    assert TrainConfig(cache_size=123).cache_size == 123  # a TOML int
    assert parse_cache_size(" 7 ") == 7


@pytest.mark.parametrize("bad", ["-1", "lots", "1.5", "Auto", "", -3, True, 2.0])
def test_bad_cache_size_is_one_line_with_hint(bad):
    with pytest.raises(ConfigError) as err:
        TrainConfig(cache_size=bad)
    msg = str(err.value)
    assert "\n" not in msg and "--cache-size" in msg and repr(bad) in msg and "HINT: --cache-size auto" in msg


def test_bad_cache_size_flag_fails_before_anything_runs():
    with pytest.raises(ConfigError, match="HINT"):
        parse(["--cache-size", "-5"])


def test_the_default_budget_is_a_quarter_of_the_hosts_memory_over_its_ranks():
    """What --help promises when --cache-size is not given: a quarter of the memory the host has available,
    split among its ranks, capped by the remote nodes worth caching."""
    from mpignn.exchange.cache_policy import cache_budget

    default, gib = parse([]).cache_size, 2**30
    assert cache_budget(default, 512, reachable=10**9, worth=10**9, spare_bytes=32 * gib, ranks_sharing=8) \
        == 32 * gib // 4 // 8 // 512
    assert cache_budget(default, 512, reachable=10**9, worth=999, spare_bytes=32 * gib, ranks_sharing=8) == 999


def test_mem_available_reads_meminfo_and_a_lower_cgroup_limit(tmp_path):
    proc, cg = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal:  16000000 kB\nMemFree: 1000 kB\nMemAvailable:   8000000 kB\n")
    (proc / "self" / "cgroup").write_text("0::/slurm/job_1\n")
    assert mem_available_bytes(str(proc), str(cg)) == 8_000_000 * 1024  # no cgroup files: meminfo alone
    (cg / "slurm" / "job_1").mkdir(parents=True)
    (cg / "slurm" / "job_1" / "memory.max").write_text("max\n")
    assert mem_available_bytes(str(proc), str(cg)) == 8_000_000 * 1024  # no limit
    (cg / "slurm" / "job_1" / "memory.max").write_text(str(3 * 2**30))
    (cg / "slurm" / "job_1" / "memory.current").write_text(str(2**30))
    assert mem_available_bytes(str(proc), str(cg)) == 2 * 2**30  # the job's limit is the tighter one
    assert mem_available_bytes(str(tmp_path / "absent"), str(cg)) is None


def test_spreading_in_chunks_gives_the_same_estimate(monkeypatch):
    import mpignn.sampling.access as access

    rng = np.random.default_rng(1)
    n = 500
    rowptr, col = _csr(n, list(zip(rng.integers(0, n, 5000).tolist(), rng.integers(0, n, 5000).tolist())))
    seeds = rng.choice(n, 100, replace=False)
    whole = _estimate(rowptr, col, seeds, [4, 3, 2], 25)
    monkeypatch.setattr(access, "_CHUNK_EDGES", 37)  # hundreds of chunks per hop, some inside one node's edges
    assert np.allclose(_estimate(rowptr, col, seeds, [4, 3, 2], 25), whole) and whole.sum() > 0
