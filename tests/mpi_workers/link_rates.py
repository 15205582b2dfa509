"""The same training runs at several link rates in one job across hosts: argv OUT RATES ARGS... (RATES
comma-separated tc rates, `none`: no cap). Before each rate the first rank of every host sets its eth0's cap
(a token bucket, as multihost-mpirun -r does); then `python -m mpignn.train ARGS --metrics-out
OUT/RATE-MODE.jsonl` runs in this process for each mode (the defaults' `auto`s, and cooperative)."""
import subprocess
import sys
from pathlib import Path

from cli_many import run_cli, run_to

from mpignn.mpi import run_main, world
from mpignn.mpi.topology import topology

MODES = {"auto": [], "cooperative": ["--minibatch", "cooperative"]}


def cap(rate: str) -> None:
    if rate == "none":
        subprocess.run(["tc", "qdisc", "del", "dev", "eth0", "root"], capture_output=True)  # none there: fine
    else:
        subprocess.run(["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "256kb",
                        "latency", "100ms"], check=True)


def main(out: str, rates: str, *args: str) -> None:
    comm, out = world(), Path(out)
    leader = topology(comm).local_rank == 0
    for rate in rates.split(","):
        if leader:
            cap(rate)
        for mode, flags in MODES.items():
            comm.Barrier()
            name = f"{rate}-{mode}"
            code = run_to(out / f"{name}.rank{comm.rank}.log", lambda: run_cli(
                "mpignn.train", [*args, *flags, "--metrics-out", str(out / f"{name}.jsonl")]))
            assert code == 0, (out / f"{name}.rank{comm.rank}.log").read_text()[-3000:]
    print(f"MPIGNN-OK rank={comm.rank}", flush=True)


if __name__ == "__main__":
    sys.exit(run_main(main, *sys.argv[1:]))
