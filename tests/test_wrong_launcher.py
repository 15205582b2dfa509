"""The wrong `mpirun` (another MPI's launcher, or torchrun: each process is an MPI singleton) is refused by every entry point
with one line, before any work: the training CLI, `runtime.bootstrap`, `mpi.whoami`, and the partition CLI."""
import sys

import pytest

from _mpirun import clean_env, run_cli_here, run_cmd
from mpignn.errors import LaunchError

# Launcher variables (rank 1 of 2) under which the MPICH that mpi4py uses starts as a singleton.
FOREIGN = {
    "openmpi": {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
    "pmix": {"PMIX_SIZE": "2"},
    "pmi": {"PMI_SIZE": "2", "PMI_RANK": "1"},
    "torchrun": {"TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"},
}


def _error_lines(out: str, prefix: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(prefix)]


def _foreign(monkeypatch, launcher: str) -> None:
    """This process, as one that launcher started: the MPICH singleton the test process already is."""
    for name, value in FOREIGN[launcher].items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("launcher", sorted(FOREIGN))
def test_train_cli_refuses_the_wrong_mpirun(tmp_path, monkeypatch, launcher):
    _foreign(monkeypatch, launcher)
    rc, out = run_cli_here("mpignn.train", ["--root", tmp_path, "--epochs", "1", "--dataset",
                                            "synthetic:num_nodes=300,avg_degree=4,num_features=4"], tmp_path)
    assert rc == 1, out[-2000:]
    errors = _error_lines(out, "mpignn: error:")
    assert len(errors) == 1 and "got 1" in errors[0] and "HINT" in errors[0] and "mpirun" in errors[0], out[-2000:]
    assert ("torchrun is not supported" in errors[0]) == (launcher == "torchrun"), errors[0]
    assert "Traceback" not in out and "final test accuracy" not in out, out[-2000:]
    assert not (tmp_path / "mpignn-parts").exists(), "it prepared data before refusing"


def test_full_pmix_launch_never_trains_as_a_singleton(tmp_path):
    # With a PMIx server's variables (Open MPI >= 4 mpirun, srun --mpi=pmix) an MPICH without PMIx support
    # refuses in MPI_Init itself, before mpignn can say anything: its own error stands, and nothing trains.
    env = clean_env(OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK="1", PMIX_RANK="1", PMIX_NAMESPACE="job.0")
    rc, out = run_cmd([sys.executable, "-m", "mpignn.train", "--root", str(tmp_path), "--epochs", "1",
                       "--dataset", "synthetic:num_nodes=300,avg_degree=4,num_features=4"], timeout=120, env=env,
                      cwd=tmp_path)
    assert rc != 0 and "final test accuracy" not in out, out[-2000:]
    assert not (tmp_path / "mpignn-parts").exists()


@pytest.mark.parametrize("launcher", sorted(FOREIGN))
def test_bootstrap_and_whoami_refuse_the_wrong_mpirun(monkeypatch, launcher):
    from mpignn.mpi import whoami
    from mpignn.runtime import bootstrap

    _foreign(monkeypatch, launcher)
    with pytest.raises(LaunchError, match="the 2 processes the launcher started; got 1.*HINT"):
        bootstrap(logging_setup=False)
    with pytest.raises(LaunchError, match="the 2 processes the launcher started"):
        whoami()


def test_one_process_of_a_launcher_is_fine(monkeypatch):
    from mpignn.runtime import bootstrap

    monkeypatch.setenv("PMI_SIZE", "1")
    monkeypatch.setenv("PMI_RANK", "0")
    assert bootstrap(logging_setup=False).world_size == 1


def test_partition_cli_refuses_to_run_as_several_copies(tmp_path, monkeypatch):
    _foreign(monkeypatch, "openmpi")
    rc, out = run_cli_here("mpignn.partition", ["--dataset", "synthetic:num_nodes=300", "--num-parts", "2", "--out",
                                                tmp_path / "p"], tmp_path)
    assert rc == 1, out[-2000:]
    errors = _error_lines(out, "mpignn.partition: error:")
    assert len(errors) == 1 and "one of 2" in errors[0] and "HINT" in errors[0], out[-2000:]
    assert not (tmp_path / "p").exists()
