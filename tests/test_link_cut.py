"""Tier 3: a link that fails (docs/node-local.md, "A link that fails"). Host 2's link is cut as
multihost-mpirun's -x cuts it (its bridge port set down), here at the moment the job reaches a phase (a line of
its log) rather than at a fixed second, so the cut lands in that phase however loaded the machine is. Every
surviving rank ends, non-zero, within --collective-timeout plus the watchdog's bound, naming the rank and host
it lost; the last checkpoint generation stays intact and resumes on the healthy host."""
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

import pytest

from test_multihost import TOOL, pytestmark  # noqa: F401  (the markers: mpi, the tool, root)

from _mpirun import WORKERS, multihost_env

from mpignn.mpi.watchdog import Watchdog

DISK = str(WORKERS / "node_disk.sh")
TIMEOUT = 5  # --collective-timeout of these runs
BOUND = Watchdog.reported_within(TIMEOUT) + 10  # the watchdog's bound, and the launcher's teardown


def _cut_host_2(launcher: int) -> None:
    subprocess.run(["ip", "-n", f"mh{launcher}-hub", "link", "set", f"mh{launcher}b2", "down"], check=True)


def _in_mpi_init(base: Path) -> bool:
    """Whether a rank of the job under `base` runs MPI_Init: its guard (mpi.startup.deadline) is a child."""
    guards = subprocess.run(["pgrep", "-f", "expected MPI_Init to connect"], capture_output=True, text=True).stdout
    for pid in guards.split():
        try:
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
            if str(base) in Path(f"/proc/{parent}/cmdline").read_text():
                return True
        except (OSError, IndexError):
            continue
    return False


def _cut_when(base: Path, pattern: str, argv: list[str], *, hosts: int = 2, per_host: int = 1,
              rate: str = "", delay: float = 0.0, limit: int = 240, poll: Callable[[], bool] | None = None,
              act: Callable[[int], None] = _cut_host_2, prefix: Sequence[str] = ()) -> tuple[int, str, float]:
    """Run `argv` (after `prefix`, a command that runs the rest) on node-local disks (base/diskN) and cut host 2's
    link (or `act` on the launcher's pid) when a line matches `pattern` (or once `poll()` is true); returns (exit
    code, output, seconds from the cut to the end; -1 when it never came)."""
    env = multihost_env()
    cmd = [str(TOOL), "-H", str(hosts), "-p", str(per_host), "-t", str(limit), *(["-r", rate] if rate else []),
           "--", DISK, str(base), str(base / "m"), ",".join(str(i) for i in range(1, hosts + 1)), *prefix,
           sys.executable, *argv]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    lines, cut, once = [], [], threading.Lock()

    def cut_once() -> None:
        with once:
            if not cut:
                time.sleep(delay)
                act(p.pid)
                cut.append(time.monotonic())

    def watch() -> None:
        while p.poll() is None and not cut:
            if poll():
                cut_once()
            time.sleep(0.05)

    if poll is not None:
        threading.Thread(target=watch, daemon=True).start()
    deadline = time.monotonic() + limit + 30
    for line in p.stdout:
        lines.append(line)
        if not cut and re.search(pattern, line):
            cut_once()
        if time.monotonic() > deadline:
            os.killpg(p.pid, 9)
            pytest.fail("".join(lines)[-3000:])
    rc = p.wait()
    out = "".join(lines)
    if rc == 2 and "multihost-mpirun:" in out:
        pytest.skip(f"multihost-mpirun could not set up hosts here: {out[-300:]}")
    return rc, out, (time.monotonic() - cut[0] if cut else -1.0)


def _left(marker: Path, within: float = 3.0) -> list[str]:
    """Processes of the job (their command line names `marker`) still running `within` seconds from now. The
    launcher returns when the ranks it can reach are gone; a rank behind a cut link ends by its own watchdog, so
    the link tests give it what is left of the same bound."""
    deadline = time.monotonic() + max(within, 3.0)
    while True:
        found = subprocess.run(["pgrep", "-af", str(marker)], capture_output=True, text=True).stdout
        left = [line for line in found.splitlines() if "pgrep" not in line]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


TRAIN = ["-m", "mpignn.train", "--hidden", "16", "--batch-size", "128", "--fanout", "5,5", "--threads", "1",
         "--collective-timeout", str(TIMEOUT)]
SMALL = ["--dataset", "synthetic:num_nodes=4000,avg_degree=8,num_features=8"]


@pytest.mark.slow
def test_a_link_cut_during_an_epoch_ends_every_rank_and_the_checkpoint_resumes(tmp_path):
    m = tmp_path / "m"
    flags = [*TRAIN, *SMALL, "--root", f"{m}/root", "--checkpoint-dir", f"{m}/ckpt", "--epochs", "40"]
    rc, out, after = _cut_when(tmp_path, r"epoch +2 \|", flags)
    assert rc != 0 and 0 <= after < TIMEOUT + BOUND, (rc, after, out[-3000:])
    assert re.search(r"rank 1 \(pid \d+ on host2\) stopped answering", out), out[-3000:]
    assert not _left(tmp_path, TIMEOUT + BOUND - after), "ranks of the cut job still run"
    gens = sorted((tmp_path / "disk1" / "ckpt").glob("gen-*/manifest.json"))
    assert gens, "no generation was kept"
    epochs = json.loads(gens[-1].read_text())["epoch"] + 2  # one or two epochs past the generation
    rc, out, _ = _cut_when(tmp_path, r"^$^", [*flags[:-1], str(epochs), "--resume"], hosts=1, per_host=2)
    assert rc == 0 and f"({gens[-1].parent.name})" in out, out[-3000:]


BIG = ["--dataset", "synthetic:num_nodes=300000,avg_degree=10,num_features=64", "--batch-size", "1024",
       "--epochs", "1", "--max-steps", "2"]
PHASES = {  # where the cut lands: (the line that starts the phase, or "": once a rank runs MPI_Init; link rate)
    "start-up": ("", ""),  # rank 0 in MPI_Init, host 2's rank held until the cut (`_start_after_the_cut`)
    "preparation": (r"ranks on 2 hosts", ""),  # rank 0 generates and partitions 600k nodes (seconds)
    "delivery": (r"partitioned ", "100mbit"),  # host 2's part (about 50 MB) at 100 Mbit/s: seconds
}


def _start_after_the_cut(go: Path) -> list[str]:
    """A prefix that holds host 2's rank until `go` exists: ranks that reach MPI_Init together leave it within
    about 0.1 s, too short a window to find a rank inside it; held, rank 0 waits there until the cut."""
    return ["sh", "-c", 'if [ "$(hostname)" = host2 ]; then while [ ! -e "$0" ]; do sleep 0.05; done; fi; exec "$@"',
            str(go)]


@pytest.mark.slow
@pytest.mark.parametrize("phase", PHASES)
def test_a_link_cut_during_start_up_preparation_or_delivery_ends_every_rank(tmp_path, phase):
    pattern, rate = PHASES[phase]
    m = tmp_path / "m"
    big = [a.replace("300000", "600000") for a in BIG] if phase == "preparation" else BIG
    go = tmp_path / "go"

    def cut_then_start_host_2(launcher: int) -> None:
        _cut_host_2(launcher)
        go.touch()

    held = {} if pattern else {"prefix": _start_after_the_cut(go), "act": cut_then_start_host_2}
    rc, out, after = _cut_when(tmp_path, pattern or r"^$^", [*TRAIN, *big, "--root", f"{m}/root"], rate=rate,
                               poll=None if pattern else lambda: _in_mpi_init(tmp_path),
                               delay=2.0 if phase == "preparation" else 0.0, **held)  # delay: past the watchdog set-up
    assert rc != 0 and 0 <= after < TIMEOUT + BOUND, (rc, after, out[-3000:])
    assert "final test accuracy" not in out, out[-3000:]
    if phase != "start-up":  # before MPI_Init returns no rank knows the others: the launcher's hosts are unnamed
        assert re.search(r"rank 1 \(pid \d+ on host2\) stopped answering", out), out[-3000:]
    assert not _left(tmp_path, TIMEOUT + BOUND - after), "ranks of the cut job still run"


@pytest.mark.slow
def test_a_link_cut_during_predict_ends_every_rank(tmp_path):
    m = tmp_path / "m"
    rc, out, _ = _cut_when(tmp_path, r"^$^", [*TRAIN, *BIG, "--root", f"{m}/root", "--checkpoint-dir", f"{m}/ckpt"])
    assert rc == 0, out[-3000:]
    rc, out, after = _cut_when(tmp_path, r"features: .* per rank", [
        "-m", "mpignn.predict", "--checkpoint-dir", f"{m}/ckpt", "--out", f"{m}/pred", "--threads", "1",
        "--collective-timeout", str(TIMEOUT)])
    assert rc != 0 and 0 <= after < TIMEOUT + BOUND, (rc, after, out[-3000:])
    assert not (tmp_path / "disk1" / "pred").exists(), "a partial predictions folder"
    assert not _left(tmp_path, TIMEOUT + BOUND - after), "ranks of the cut job still run"
