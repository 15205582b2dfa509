"""MPIStore's key semantics across ranks (TCPStore's): a key set on the last rank is read on the others,
get/wait block until it exists, add/compare_set/delete_key/check/num_keys, a missing key times out, and rank 0
closing first still answers the ranks that are not done."""
import datetime
import time

import torch.distributed as dist

from cli_many import end

from mpignn.mpi import run_main, whoami, world
from mpignn.launch.mpi_store import MPIStore


def main() -> None:
    topo, comm = whoami(), world()
    last = comm.size - 1
    store = MPIStore(comm, datetime.timedelta(seconds=20))
    if comm.rank == last:
        time.sleep(0.5)  # the others are already waiting in get/wait
        store.set("late", b"\x00\xffbytes")
    assert store.get("late") == b"\x00\xffbytes"
    store.wait(["late"])
    assert store.add("count", 2) >= 2
    comm.Barrier()
    assert store.add("count", 0) == 2 * comm.size and store.get("count") == str(2 * comm.size).encode()
    assert store.check(["late", "count"]) and not store.check(["late", "never"])
    comm.Barrier()
    if comm.rank == 0:
        assert store.compare_set("cas", b"x", b"y") == b"x"  # missing key, non-empty expectation: unchanged
        assert store.compare_set("cas", b"", b"one") == b"one"
        assert store.compare_set("cas", b"wrong", b"two") == b"one"
        assert store.compare_set("cas", b"one", b"two") == b"two"
        assert store.num_keys() == 3 and store.delete_key("cas") and not store.delete_key("cas")
        via_cpp = dist.PrefixStore("p/", store)  # C++ calls reach the Python methods (deleteKey, getNumKeys)
        via_cpp.set("k", b"v")
        assert via_cpp.num_keys() == 3 and via_cpp.delete_key("k") and store.num_keys() == 2
    comm.Barrier()
    assert store.num_keys() == 2, store.num_keys()
    start = time.monotonic()
    try:
        store.wait(["never"], datetime.timedelta(seconds=1))
        raise AssertionError("waiting for a key nobody sets returned")
    except dist.DistStoreError as exc:
        assert "never" in str(exc) and "HINT" in str(exc) and time.monotonic() - start < 5, exc
    store.set(f"after-timeout-{comm.rank}", b"ok")  # a late answer must not be taken for this one's
    assert store.get(f"after-timeout-{comm.rank}") == b"ok"
    comm.Barrier()
    store.close()
    # Rank 0 leaves first (an error every rank raises right after init_process_group, then shutdown) while
    # the others still ask for a key: its thread must keep answering until they are done.
    early = MPIStore(comm, datetime.timedelta(seconds=20))
    if comm.rank == 0:
        early.set("early", b"v")
        early.close()
    else:
        time.sleep(0.5)
        assert early.get("early") == b"v"
        early.close()
    print(f"MPIGNN-OK rank={topo.rank}", flush=True)


if __name__ == "__main__":
    end(run_main(main))
