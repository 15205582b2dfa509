"""One GPU per rank by mask, or one GPU for all (argv: own|same, expected backend, expected shared_by): the
mask is set from the MPI topology before torch starts CUDA, then bootstrap decides from device identities."""
import os
import sys

from mpignn.mpi import run_main, topology, world


def main(mode: str, backend: str, shared_by: str) -> None:
    topo = topology(world())
    os.environ["CUDA_VISIBLE_DEVICES"] = str(topo.local_rank) if mode == "own" else "0"
    from mpignn.runtime import bootstrap, shutdown  # imports torch: after the mask

    rt = bootstrap(device="cuda")
    assert rt.choice.device == "cuda:0", rt.choice
    assert (rt.choice.backend, rt.choice.shared_by) == (backend, int(shared_by)), rt.choice
    shutdown()
    print(f"MPIGNN-OK rank={topo.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, *sys.argv[1:4]))
