"""Tier 3 on hosts that share no disk (docs/node-local.md): each emulated host binds a folder of its own over
one path (tests/mpi_workers/node_disk.sh: multihost-mpirun's -d, but one that outlives the job, as node-local
scratch does), and the next job lands on the hosts in another order, on a subset, or on new hosts."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from test_multihost import _multihost, pytestmark  # noqa: F401  (the markers: mpi, the tool, root)

from _mpirun import WORKERS

DISK = str(WORKERS / "node_disk.sh")
GRAPH = ["--dataset", "synthetic:num_nodes=4000,avg_degree=8,num_features=8", "--hidden", "16", "--batch-size",
         "128", "--fanout", "5,5", "--threads", "1"]


def _job(base: Path, order: str, per_host: int, argv: list[str], hosts: int = 2) -> tuple[int, str]:
    """`argv` on `hosts` hosts x `per_host` ranks, host i seeing base/disk{order[i]} at base/m."""
    return _multihost(hosts, per_host, [DISK, str(base), str(base / "m"), order, sys.executable, *argv])


def _jobs(base: Path, order: str, per_host: int, cases: dict[str, list[str]], hosts: int = 2) -> dict[str, str]:
    """The CLI runs `cases` ({name: [module, args...]}) one after another in one job of `_job` (the ranks import
    torch once: mpi_workers/cli_many.py); -> {name: its ranks' output}, each asserted to end 0 on every rank."""
    logs = base / f"logs-{len(list(base.glob('logs-*')))}"
    logs.mkdir(parents=True)
    (logs / "cases.json").write_text(json.dumps(cases))
    rc, out = _job(base, order, per_host, [str(WORKERS / "cli_many.py"), str(logs / "cases.json"), str(logs)], hosts)
    ranks = hosts * per_host
    found = {name: "".join(p.read_text() for p in sorted(logs.glob(f"{name}.rank*.log"))) for name in cases}
    for name in cases:
        codes = [(logs / f"{name}.rank{r}.rc") for r in range(ranks)]
        assert rc == 0 and all(c.is_file() and c.read_text() == "0" for c in codes), (name, out[-3000:],
                                                                                     found[name][-3000:])
    return found


def _disk(base: Path, n: int) -> Path:
    return base / f"disk{n}"


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_hosts_without_a_shared_disk_train_resume_in_another_order_and_predict(tmp_path):
    """--root, --checkpoint-dir, --metrics-out and predict's --out on node-local disks, 2 hosts x 2 ranks (a
    host's local rank 0 writes for both; 2 hosts x 1 rank train in test_multihost and test_link_cut): the first
    job makes each folder on every host that writes it; the requeued job (hosts in the other order) is delivered
    the part, checkpoint and learnable-row files its ranks' hosts lack, resumes and replays the uninterrupted run;
    predict writes the whole folder on rank 0's host; a subset that lacks a part of a given partition is refused,
    naming what each host holds; new hosts are refused a --resume (never a fresh start)."""
    from test_reproducible import same_run

    from mpignn.predict.output import load

    m = tmp_path / "m"
    per_host = 2
    ranks = 2 * per_host
    flags = [*GRAPH, "--root", f"{m}/root", "--checkpoint-dir", f"{m}/ckpt", "--metrics-out", f"{m}/out/m.jsonl",
             "--tensorboard", f"{m}/tb"]
    flags += ["--embed-dim", "4"]  # learnable rows: one file per rank, on its host
    reference = tmp_path / "reference"  # the uninterrupted run, on a shared folder: the same records
    first = {"train": ["mpignn.train", *flags, "--epochs", "2"],
             "reference": ["mpignn.train", *[a.replace(str(m), str(reference)) for a in flags], "--epochs", "3"]}
    out = _jobs(tmp_path, "1,2", per_host, first)["train"]
    assert f"{ranks} ranks on 2 hosts" in out, out[-3000:]
    parts = sorted(_disk(tmp_path, 1).glob("root/mpignn-parts/*"))
    assert len(parts) == 1, parts
    folder = Path(f"{m}/root/mpignn-parts") / parts[0].name
    for n in (1, 2):  # each host: the generations and best/ (checkpoint.pt, manifest), its ranks' rows, its parts
        ckpt = _disk(tmp_path, n) / "ckpt"
        assert (ckpt / "gen-000002" / "manifest.json").is_file() and (ckpt / "best" / "checkpoint.pt").is_file()
        held = sorted(p.name for p in (_disk(tmp_path, n) / "root/mpignn-parts" / folder.name).glob("part-*"))
        assert held == ([f"part-{k:03d}" for k in range(ranks)] if n == 1 else
                        [f"part-{k:03d}" for k in range(per_host, ranks)]), (n, held)
    assert (_disk(tmp_path, 1) / "out/m.jsonl").is_file() and not (_disk(tmp_path, 2) / "out").exists()
    assert list((_disk(tmp_path, 1) / "tb").glob("events.out.tfevents.*")) and not (_disk(tmp_path, 2) / "tb").exists()

    # a subset: the host holding parts 2 and 3 alone cannot run a given partition, and says why
    rc, out = _job(tmp_path, "2", ranks, ["-m", "mpignn.train", *flags, "--partitions", str(folder), "--epochs",
                                          "3", "--resume"], hosts=1)
    assert rc != 0 and "expected the job's hosts to hold parts [0, 1, 2, 3]" in out, out[-3000:]
    assert "host1: part-002, part-003" in out, out[-3000:]
    assert sorted(p.name for p in (_disk(tmp_path, 2) / "root/mpignn-parts" / folder.name).glob("part-*")) == \
        ["part-002", "part-003"], "a refused job changed the partition"

    # the requeued job lands on the hosts in the other order: rank 0 on the host that holds parts 2 and 3 only; then
    # predict, in the same job
    outs = _jobs(tmp_path, "2,1", per_host, {
        "requeued": ["mpignn.train", *flags, "--partitions", str(folder), "--epochs", "3", "--resume"],
        "predict": ["mpignn.predict", "--checkpoint-dir", f"{m}/ckpt", "--out", f"{m}/pred", "--root", f"{m}/root"]})
    out = outs["requeued"]
    assert "resumed from" in out and "gen-000002" in out, out[-3000:]
    assert "partitioned" not in out and "its host lacked parts it loads" in out, out[-3000:]
    resumed = _records(_disk(tmp_path, 2) / "out/m.jsonl")  # rank 0's host now
    assert list((_disk(tmp_path, 2) / "tb").glob("events.out.tfevents.*"))
    assert [r["epoch"] for r in resumed] == [2], resumed
    assert same_run(_records(reference / "out/m.jsonl")[2]) == same_run(resumed[0])  # replays the reference

    assert not (_disk(tmp_path, 1) / "pred").exists() and not list(_disk(tmp_path, 1).glob(".pred*"))
    pred = load(_disk(tmp_path, 2) / "pred")
    assert np.array_equal(pred["node_id"], np.arange(4000)), "predictions missing rows of the other host's ranks"

    # new hosts: one rank each is enough (each rank refuses on its own)
    rc, out = _job(tmp_path, "3,4", 1, ["-m", "mpignn.train", *flags, "--epochs", "3", "--resume"])
    assert rc != 0 and out.count("--resume expected a checkpoint") == 2, out[-3000:]
    assert not (_disk(tmp_path, 3) / "ckpt" / "gen-000001").exists()
