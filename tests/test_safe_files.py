"""Nothing mpignn reads back is unpickled, and a write killed half-way never leaves a trusted file."""
import io
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from mpignn.training.checkpoint import latest_checkpoint, load_checkpoint, save_state
from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.errors import ConfigError, PartitionFormatError
from mpignn.partition import load_partition, partition_graph


class _Payload:
    """Unpickling this runs code: it creates the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _crafted_npy(path, marker, size):
    """A .npy of exactly `size` bytes whose object array runs code when unpickled (pickle ignores the padding
    after its STOP opcode), so a size check cannot be what stops it."""
    buf = io.BytesIO()
    np.save(buf, np.array([_Payload(str(marker))], dtype=object), allow_pickle=True)
    data = buf.getvalue()
    assert len(data) < size, (len(data), size)
    path.write_bytes(data + b"\0" * (size - len(data)))


def test_crafted_partition_file_does_not_run_code(tmp_path):
    g = make_synthetic(SyntheticSpec(num_nodes=500, avg_degree=4, num_features=3))
    partition_graph(g, 2, tmp_path / "p", method="random")
    marker = tmp_path / "pwned"
    target = tmp_path / "p" / "part-000" / "x.npy"
    _crafted_npy(target, marker, target.stat().st_size)
    with pytest.raises(PartitionFormatError, match="cannot be read.*allow_pickle"):
        load_partition(tmp_path / "p", 0, verify=False)  # even with checksums off; sizes match
    assert not marker.exists()
    np.load(target, allow_pickle=True)  # the file is a real attack: unpickled, it runs the payload
    assert marker.exists()


def test_crafted_checkpoint_does_not_run_code(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"epoch": 0, "model": _Payload(str(marker))}, tmp_path / "checkpoint.pt")
    with pytest.raises(ConfigError, match="cannot resume.*UnpicklingError"):
        load_checkpoint(tmp_path, torch.nn.Linear(2, 2))
    assert not marker.exists()
    torch.load(tmp_path / "checkpoint.pt", weights_only=False)  # the file is a real attack
    assert marker.exists()


_SLOW_WRITER = r"""
import sys, time, torch
import mpignn.fileio as fileio
from mpi4py import MPI
from mpignn.training.checkpoint import save_state
from mpignn.data import make_synthetic
from mpignn.data.synthetic import SyntheticSpec
from mpignn.partition import partition_graph

what, folder = sys.argv[1], sys.argv[2]
real_save = fileio.save_npy
def slow_save(path, array):  # write half of the file, then stall: the parent kills us here
    real_save(path, array)
    if "part-001" in str(path):
        print("STALLED", flush=True); time.sleep(600)
import mpignn.partition.write as fmt  # the module that writes part folders
fmt.save_npy = slow_save
if what == "partition":
    g = make_synthetic(SyntheticSpec(num_nodes=800, avg_degree=4, num_features=3, seed=5))
    partition_graph(g, 2, folder, method="random", force=True)
else:
    import mpignn.training.checkpoint as ckpt
    real = ckpt.write_durable
    def stalled(final, write):  # the checkpoint file: half of it in its temporary file, then stall
        if not str(final).endswith("checkpoint.pt"):
            return real(final, write)
        def half(f):
            f.write(b"PK\x03\x04half a zip"); f.flush()
            print("STALLED", flush=True); time.sleep(600)
        return real(final, half)
    ckpt.write_durable = stalled
    m = torch.nn.Linear(4, 2)
    save_state(MPI.COMM_SELF, folder, epoch=7, step=0, model=m, optimizer=torch.optim.Adam(m.parameters()),
               device="cpu", extra={})
"""


def _kill_while_writing(what, folder):
    p = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, what, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "STALLED"
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait(timeout=30)


def test_partition_killed_mid_write_keeps_the_old_folder(tmp_path):
    g = make_synthetic(SyntheticSpec(num_nodes=800, avg_degree=4, num_features=3))
    partition_graph(g, 2, tmp_path / "p", method="metis")
    before = (tmp_path / "p" / "META.json").read_text()
    _kill_while_writing("partition", tmp_path / "p")
    assert (tmp_path / "p" / "META.json").read_text() == before
    assert load_partition(tmp_path / "p", 1).meta.method == "metis"


def test_partition_killed_mid_write_leaves_nothing_trusted(tmp_path):
    _kill_while_writing("partition", tmp_path / "fresh")
    with pytest.raises(PartitionFormatError, match="does not exist"):
        load_partition(tmp_path / "fresh", 0)


def test_checkpoint_killed_mid_write_keeps_the_previous(tmp_path):
    from mpi4py import MPI

    model = torch.nn.Linear(4, 2)
    save_state(MPI.COMM_SELF, tmp_path, epoch=3, step=0, model=model, optimizer=torch.optim.Adam(model.parameters()),
               device="cpu", extra={})
    _kill_while_writing("checkpoint", tmp_path)
    assert load_checkpoint(latest_checkpoint(tmp_path), torch.nn.Linear(4, 2))["epoch"] == 3
