"""2 ranks: a reply that arrives after its wait ended vouches for no one later. Rank 1's watchdog answers a ping
of rank 0 and then stops answering (as a process stopped with SIGSTOP does); that pong, still unread on rank 0,
must not count as an answer to rank 0's next ping, nor a late answer to one question as the answer to the next."""
import json
import sys
import time

from mpignn.mpi import run_main, world
from mpignn.mpi.watchdog import _ASK, _PONG, _TELL, Watchdog, watching


def _wait_for(dog: Watchdog, tag: int) -> None:
    deadline = time.monotonic() + 20
    while not dog.comm.Iprobe(source=1, tag=tag):
        assert time.monotonic() < deadline, f"no message with tag {tag} from rank 1"
        time.sleep(0.01)


def main() -> None:
    comm = world()
    if watching() is not None:  # every rank alike: none running, none kept for the next script
        watching().stop()
    dog = Watchdog(comm, 8.0, grace=1.0, tick=0.05)  # collective; only rank 1's thread runs (it answers)
    if comm.rank == 1:
        dog.start()
    else:
        dog._ping([1])
        _wait_for(dog, _PONG)  # rank 1's answer waits unread, as one does after a long wait ends
        asked = dog._ping([1], tag=_ASK)
        _wait_for(dog, _TELL)
    comm.Barrier()
    if comm.rank == 1:
        dog.stop()  # from here rank 1 answers nothing
    comm.Barrier()
    if comm.rank == 0:
        assert dog.silent_ranks() == [1], "a pong from before rank 1 stopped vouched for it"
        tells = dog._drain(_TELL)
        assert [json.loads(data)["round"] for _, data in tells] == [asked], tells  # numbered: tellable apart
    dog.stop()
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main))
