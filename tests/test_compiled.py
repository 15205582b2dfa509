"""`compiled.serial_or_parallel`: the thread count picks the compiled twin, both compute the same, and numba's
on-disk cache keeps them apart; the samplers compile one variant for mapped and in-memory parts (Tier 1)."""
import numba
import numpy as np
import pytest

from mpignn.compiled import ensure_numba_cache_dir, serial_or_parallel
from mpignn.sampling import kernels

ensure_numba_cache_dir(__file__.rsplit("/", 1)[0])


@serial_or_parallel
def _squares(n):
    out = np.empty(n, dtype=np.int64)
    for i in numba.prange(n):
        out[i] = i * i
    return out


@pytest.fixture
def threads():
    before = numba.get_num_threads()
    yield
    numba.set_num_threads(before)


def test_one_thread_compiles_and_calls_the_serial_twin_only(threads):
    numba.set_num_threads(1)
    assert _squares(5).tolist() == [0, 1, 4, 9, 16]
    assert _squares.serial.signatures and not _squares.parallel.signatures
    if numba.config.NUMBA_NUM_THREADS > 1:
        numba.set_num_threads(2)
        assert _squares(3).tolist() == [0, 1, 4]
        assert _squares.parallel.signatures


def test_the_twins_are_cached_under_their_own_names():
    serial, parallel = _squares.serial.py_func, _squares.parallel.py_func
    assert serial.__qualname__ == "_squares" and parallel.__qualname__ == "_squares_parallel"
    assert _squares.__name__ == "_squares" and parallel.__code__ is serial.__code__
    assert _squares.parallel.targetoptions.get("parallel") and not _squares.serial.targetoptions.get("parallel")


def test_the_sampling_kernel_draws_the_same_serially_and_in_parallel():
    rng = np.random.default_rng(0)
    n, deg = 500, rng.integers(0, 40, 500)
    rowptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    col = rng.integers(0, n, int(rowptr[-1])).astype(np.int64)
    rows = rng.integers(0, n, 2000).astype(np.int64)
    for fanouts in (np.array([5]), np.array([-1]), np.array([3, 7])):
        args = (rowptr, col, rows, rows, fanouts.astype(np.int64), kernels.mix_seed(3, 4))
        a, b = kernels.sample_rows.serial(*args), kernels.sample_rows.parallel(*args)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert a[0].sum() == len(a[1]) > 0


@pytest.mark.parametrize("labor", [False, True])
def test_mapped_and_in_memory_parts_sample_through_one_compiled_variant(threads, labor):
    """`LocalHops` hands its kernels read-only views (`compiled.read_only`): a part mapped from a file (read-only
    arrays) and one in memory draw through one compiled variant, not one each, and draw the same."""
    from mpignn.sampling import LocalHops

    numba.set_num_threads(1)
    rowptr, col = np.array([0, 2, 3, 5], dtype=np.int64), np.array([1, 2, 0, 0, 1], dtype=np.int64)
    mapped = [a.copy() for a in (rowptr, col)]
    for a in mapped:
        a.flags.writeable = False
    seeds = np.arange(3, dtype=np.int64)
    kernel = kernels.sample_rows.serial if not labor else LocalHops._kernels["labor_rows"].serial

    def draw(hops):
        return hops.sample_labor(seeds, 2, 7) if labor else hops.sample(seeds, 2, 7)

    first = draw(LocalHops(rowptr, col))
    variants = len(kernel.signatures)
    second = draw(LocalHops(*mapped))
    assert len(kernel.signatures) == variants, kernel.signatures
    assert all(np.array_equal(a, b) for a, b in zip(first, second))
