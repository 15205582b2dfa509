"""`--feature-device`: where a rank's feature table lives. The choice (`launch.device.features_on_device`), its
refusal, and on the CPU (where "device" is a torch tensor table gathered by index ops) the same losses as a
host table, on one rank and across two parts (whose rows then cross by the torch exchange, or by MPI through
host buffers)."""
import json

import numpy as np
import pytest
import torch

from _config import parse
from mpignn.errors import ConfigError
from mpignn.launch.device import FEATURE_DEVICE_SHARE, features_on_device

GiB = 2**30


@pytest.mark.parametrize("choice, exchange, device, parts, table, free, shared, want", [
    ("auto", "auto", "cuda:0", 1, 1 * GiB, 10 * GiB, 1, True),  # fits: on the device
    ("auto", "auto", "cuda:0", 1, 6 * GiB, 10 * GiB, 1, False),  # above the share of free memory
    ("auto", "auto", "cuda:0", 1, 2 * GiB, 10 * GiB, 4, False),  # four ranks share the device's memory
    ("auto", "auto", "cuda:0", 2, 1 * GiB, 10 * GiB, 1, False),  # several parts: the MPI exchange's host rows
    ("auto", "torch", "cuda:0", 2, 1 * GiB, 10 * GiB, 1, True),  # --exchange torch: device to device
    ("auto", "auto", "cpu", 1, 1, None, 1, False),  # no accelerator
    ("host", "auto", "cuda:0", 1, 1, 10 * GiB, 1, False),
    ("device", "auto", "cpu", 2, 6 * GiB, None, 1, True),  # asked for: no measurement overrides it
])
def test_the_table_goes_where_the_flag_and_the_free_memory_say(choice, exchange, device, parts, table, free,
                                                               shared, want):
    assert features_on_device(choice, exchange, device, parts, table, free, shared) is want


def test_auto_takes_at_most_its_share_of_free_memory():
    free = 8 * GiB
    assert features_on_device("auto", "auto", "xpu:0", 1, int(FEATURE_DEVICE_SHARE * free), free)
    assert not features_on_device("auto", "auto", "xpu:0", 1, int(FEATURE_DEVICE_SHARE * free) + 1, free)


def test_a_host_table_with_the_device_exchange_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="^--feature-device host keeps .* --exchange torch .*HINT: --exchange auto$"):
        parse(["--feature-device", "host", "--exchange", "torch"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tensor_rows_cross_by_mpi_through_host_buffers_and_come_back_as_they_were(dtype):
    """`--feature-device device --exchange mpi`: a device table's rows staged through the host (one rank's
    all-to-all with itself)."""
    from mpi4py import MPI

    from mpignn.exchange.alltoall import MpiAlltoall

    rows = torch.randn(5, 3).to(dtype)
    got = MpiAlltoall(MPI.COMM_SELF).rows(rows, np.array([5]), np.array([5]))
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and torch.equal(got, rows)


def _losses(path) -> list[float]:
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


ARGS = ["--dataset", "synthetic:num_nodes=2000,avg_degree=8,num_features=8,num_classes=4", "--epochs", "2",
        "--fanout", "5,4", "--hidden", "16", "--batch-size", "256"]


@pytest.mark.parametrize("mode", ["independent", "full", "link"])
def test_a_table_on_the_device_trains_as_one_on_the_host_also_with_batches_built_there(tmp_path, mode, capfd):
    """Features on the device, then hops drawn and batches relabelled there too (`DeviceSampler`)."""
    from mpignn import train

    losses = {}
    for where, sample_on in (("host", "host"), ("device", "host"), ("device", "device")):
        out = tmp_path / f"{where}-{sample_on}.jsonl"
        capfd.readouterr()
        task = ["--task", "link", "--minibatch", "independent"] if mode == "link" else ["--minibatch", mode]
        assert train.main([*ARGS, *task, "--root", str(tmp_path / "data"), "--threads", "1",
                           "--feature-device", where, "--sample-on", sample_on, "--metrics-out", str(out)]) == 0
        text = capfd.readouterr()
        assert ("batches drawn and relabelled on the device" in text.out + text.err) == (sample_on == "device")
        losses[where, sample_on] = _losses(out)
    assert losses["device", "host"] == losses["host", "host"] == losses["device", "device"]
    assert len(losses["host", "host"]) == 2


@pytest.mark.mpi
def test_two_parts_with_tables_on_the_device_train_as_on_the_host(tmp_path):
    from _mpirun import records, train_runs

    variants = (("host", "auto"), ("device", "auto"), ("device", "mpi"))  # torch exchange; staged
    runs = train_runs(2, tmp_path, [*ARGS, "--minibatch", "independent", "--root", tmp_path / "data"],
                      {f"{where}-{exchange}": ["--feature-device", where, "--exchange", exchange]
                       for where, exchange in variants})
    losses = {}
    for where, exchange in variants:
        recs, text = records(tmp_path, runs, f"{where}-{exchange}")
        assert f"on the {'device (cpu)' if where == 'device' else 'host'} (--feature-device {where})" in text
        losses[where, exchange] = [r["loss"] for r in recs]
    assert losses["device", "auto"] == losses["host", "auto"] == losses["device", "mpi"]
    assert len(losses["host", "auto"]) == 2
