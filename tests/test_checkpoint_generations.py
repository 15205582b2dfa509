"""Checkpoints as one unit: a generation (rows, model, manifest last) is complete or ignored; a kill or a full
disk while saving leaves the previous one resumable; the newest K are kept; ranks that found different
checkpoints (a stale node-local folder) refuse to resume on every rank."""
import errno
import json
import os
import shutil
import sys

import numpy as np
import pytest
import torch

import mpignn.training.checkpoint as ckpt
import mpignn.exchange.embedding as embedding
from _config import parse
from _mpirun import SHARED, WORKERS, multihost_env, ok_ranks, run_cmd, run_mpi, run_mpi_raw
from mpignn.errors import ConfigError, is_agreed
from mpignn.exchange.embedding import NodeEmbedding
from mpignn.fileio import sha256_file
from mpignn.training.checkpoint_hosts import bring_generation

TOOL = SHARED / "tools" / "multihost-mpirun"


@pytest.fixture
def comm():
    from mpi4py import MPI
    return MPI.COMM_SELF


def _objects(value):
    model = torch.nn.Linear(3, 2)
    torch.nn.init.constant_(model.weight, value), torch.nn.init.constant_(model.bias, value)
    rows = NodeEmbedding(4, 2)
    rows.weight[...] = 10 * value
    return model, torch.optim.SGD(model.parameters(), lr=0.1), rows


def _save(comm, folder, value, keep=2):
    model, opt, rows = _objects(value)
    return ckpt.save_state(comm, folder, epoch=value, step=0, model=model, optimizer=opt, device="cpu", extra={},
                           rows=rows, keep=keep)


def _resumed(comm, folder):
    model, opt, rows = _objects(0)
    info = ckpt.resume_state(comm, folder, model, opt, {}, "cpu", rows=rows)
    assert torch.all(model.weight == info["epoch"]) and np.all(rows.weight == 10 * info["epoch"])
    return info["epoch"], info["generation"]


def test_a_generation_holds_every_file_with_its_hash_and_the_newest_k_are_kept(comm, tmp_path):
    for value in range(1, 5):
        _save(comm, tmp_path, value)
    assert [p.name for p in ckpt.generations(tmp_path)] == ["gen-000003", "gen-000004"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen-000003", "gen-000004"]  # no temporary files
    gen = tmp_path / "gen-000004"
    manifest = json.loads((gen / ckpt.MANIFEST).read_text())
    assert (manifest["generation"], manifest["epoch"], manifest["step"], manifest["world_size"]) == (4, 4, 0, 1)
    assert manifest["files"] == {name: sha256_file(gen / name) for name in ("checkpoint.pt", "embedding-rank0.npz")}
    assert _resumed(comm, tmp_path) == (4, "gen-000004")
    _save(comm, tmp_path, 5, keep=1)
    assert [p.name for p in ckpt.generations(tmp_path)] == ["gen-000005"]
    assert parse(["--dataset", "Cora"]).keep_checkpoints == 2
    with pytest.raises(ConfigError, match="--keep-checkpoints expected at least 1; got 0. HINT"):
        parse(["--dataset", "Cora", "--keep-checkpoints", "0"])


@pytest.mark.parametrize("where", ["model", "rows"])
def test_a_full_disk_keeps_the_previous_generation_and_says_so_in_one_line(comm, tmp_path, monkeypatch, where):
    _save(comm, tmp_path, 1)
    module = ckpt if where == "model" else embedding
    real = module.write_durable

    def full_disk(final, write):
        def half(f):
            f.write(b"PK\x03\x04 half")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(final, half)

    monkeypatch.setattr(module, "write_durable", full_disk)
    with pytest.raises(ConfigError) as exc:
        _save(comm, tmp_path, 2)
    message = str(exc.value)
    assert "\n" not in message and "No space left on device" in message, message
    assert "HINT: free space there or use another --checkpoint-dir; the previous checkpoint gen-000001 is kept" \
        in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen-000001"]  # nothing half-written left
    assert _resumed(comm, tmp_path) == (1, "gen-000001")


def test_the_older_single_file_format_is_refused_and_kept(comm, tmp_path):
    model, opt, _ = _objects(3)
    torch.save({"format": ckpt.FORMAT, "epoch": 3, "step": 2, "model": model.state_dict(),
                "optimizer": opt.state_dict(), "rng": {}, "extra": {}}, tmp_path / "checkpoint.pt")
    with pytest.raises(ConfigError, match=r"found only .*checkpoint.pt, a single-file checkpoint of the format before "
                                          r"generations, .* HINT: another --checkpoint-dir"):
        ckpt.resume_state(comm, tmp_path, *_objects(0)[:2], {}, "cpu")
    assert (tmp_path / "checkpoint.pt").is_file()


@pytest.mark.parametrize("torn", [b'{"epoch": 3,', b"[]", b"\xff{"])
def test_a_corrupt_manifest_is_one_agreed_line_before_and_at_the_resume(comm, tmp_path, torn):
    _save(comm, tmp_path, 1)
    _save(comm, tmp_path, 2)
    (tmp_path / "gen-000002" / ckpt.MANIFEST).write_bytes(torn)
    fix = f"HINT: the manifest is corrupt; delete {tmp_path / 'gen-000002'} to resume from the checkpoint before it"
    with pytest.raises(ConfigError, match=r"cannot resume from .*gen-000002/manifest.json: (JSONDecodeError|"
                                          r"ValueError): ") as err:
        bring_generation(comm, tmp_path)  # --resume/--requeue: rank 0 plans, every rank raises (check_all)
    assert is_agreed(err.value) and str(err.value).endswith(fix) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"cannot resume from .*gen-000002/manifest.json: ") as err:
        _resumed(comm, tmp_path)
    assert str(err.value).endswith(fix)
    shutil.rmtree(tmp_path / "gen-000002")  # the fix the HINT names
    assert bring_generation(comm, tmp_path) == "gen-000001" and _resumed(comm, tmp_path) == (1, "gen-000001")


@pytest.mark.mpi
def test_a_kill_between_the_rows_and_the_model_leaves_the_previous_generation(tmp_path):
    worker = [sys.executable, str(WORKERS / "checkpoint_gen.py"), str(tmp_path)]
    run_mpi("checkpoint_gen.py", 2, tmp_path, "save:1", timeout=90)
    rc, out = run_mpi_raw(2, [*worker, "crash:2"], timeout=90)
    assert rc != 0 and not ok_ranks(out), out[-2000:]
    assert sorted(p.name for p in (tmp_path / "gen-000002").iterdir())[:1] == ["embedding-rank0.npz"], out[-2000:]
    assert not (tmp_path / "gen-000002" / "checkpoint.pt").exists()  # killed before the model was written
    run_mpi("checkpoint_gen.py", 2, tmp_path, "resume:1", "save:3", "resume:3", timeout=90)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen-000001", "gen-000003"]  # the torso is gone


@pytest.mark.mpi
@pytest.mark.skipif(not TOOL.is_file(), reason="../shared/tools/multihost-mpirun is absent")
@pytest.mark.skipif(os.geteuid() != 0, reason="multihost-mpirun needs root (network namespaces)")
def test_a_stale_node_local_checkpoint_is_refused_on_every_rank(tmp_path):
    """Two hosts, each with its own --checkpoint-dir (bind-mounted at the same path); host1's folder is one
    generation behind: every rank refuses, naming both checkpoints and the fix."""
    ck = tmp_path / "ck"
    ck.mkdir()

    def on_hosts(*actions):
        script = (f"mkdir -p {tmp_path}/$(hostname) && mount --bind {tmp_path}/$(hostname) {ck} && exec "
                  f"{sys.executable} {WORKERS / 'checkpoint_gen.py'} {ck} {' '.join(actions)}")
        env = multihost_env()
        rc, out = run_cmd([str(TOOL), "-H", "2", "-p", "1", "-t", "120", "--", "unshare", "--mount", "sh", "-c",
                           script], timeout=150, env=env)
        if rc == 2 and "multihost-mpirun:" in out:
            pytest.skip(f"multihost-mpirun could not set up hosts here: {out[-300:]}")
        assert rc == 0 and len(ok_ranks(out)) == 2, out[-3000:]
        return out

    on_hosts("save:1", "save:2", "resume:2")  # each host's first rank writes its own folder
    hosts = sorted(p for p in tmp_path.iterdir() if p.name.startswith("host"))
    assert [[g.name for g in ckpt.generations(h)] for h in hosts] == [["gen-000001", "gen-000002"]] * 2
    for g in ckpt.generations(hosts[1])[-1:]:
        for f in g.iterdir():
            f.unlink()
        g.rmdir()
    out = on_hosts("refuse")
    # The two hosts' lines can reach the launcher's output without a newline between them: split on the marker.
    refused = ["REFUSED" + piece for piece in out.split("REFUSED")[1:]]
    assert sorted(piece.split()[1].rstrip(":") for piece in refused) == ["rank=0", "rank=1"], out[-3000:]
    for line in refused:
        assert "--resume expects every rank to load the same checkpoint; got rank 0: gen-000002 (epoch 2 step 0" \
            in line and "rank 1: gen-000001 (epoch 1 step 0" in line and "HINT: the hosts' --checkpoint-dir" in line, \
            line
    assert not list(ck.iterdir()), "the ranks wrote outside their node-local folders"
