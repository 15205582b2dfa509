"""Tier 1: launcher detection, torch env export and the thread budget, with the environment faked."""
import os

import pytest

from mpignn import env


def test_single_process_when_nothing_is_set():
    assert env.detect({}) == env.LaunchInfo(launcher="none")


def test_mpich_hydra():
    info = env.detect({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"})
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.local_size) == ("mpich", 3, 4, 1, 2)


def test_openmpi():
    info = env.detect({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                       "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_NODE_RANK": "1"})
    assert (info.rank, info.world_size, info.local_rank, info.local_size, info.host_rank) == (5, 8, 1, 4, 1)


def test_slurm_and_its_task_list_syntax():
    info = env.detect({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
                       "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "2(x2)"})
    assert (info.launcher, info.rank, info.local_rank, info.local_size, info.host_rank, info.num_hosts) == \
        ("slurm", 3, 1, 2, 1, 2)


def test_mpirun_inside_sbatch_beats_slurm_variables():
    info = env.detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "PMI_RANK": "2", "PMI_SIZE": "4"})
    assert (info.launcher, info.rank, info.world_size) == ("mpich", 2, 4)


def test_torchrun():
    info = env.detect({"TORCHELASTIC_RUN_ID": "x", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                       "LOCAL_WORLD_SIZE": "2"})
    assert (info.launcher, info.rank, info.local_rank) == ("torchrun", 1, 1)


def test_foreign_launcher_size():
    assert env.foreign_launcher_size({"OMPI_COMM_WORLD_SIZE": "4"}) == 4
    assert env.foreign_launcher_size({}) == 1


def test_export_keeps_user_values_unless_told():
    fake = {"MASTER_ADDR": "10.0.0.9"}
    changed = env.export_torch_env({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": 1234, "RANK": 0}, env=fake)
    assert fake == {"MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "1234", "RANK": "0"} and changed == {}
    changed = env.export_torch_env({"MASTER_ADDR": "10.0.0.1"}, env=fake, overwrite=True)
    assert fake["MASTER_ADDR"] == "10.0.0.1" and changed == {"MASTER_ADDR": ("10.0.0.9", "10.0.0.1")}


def test_thread_budget():
    assert env.thread_budget(4, cpus=16, host_cpus=16) == (4, False)
    assert env.thread_budget(3, cpus=2, host_cpus=2) == (1, True)
    assert env.thread_budget(8, cpus=2, host_cpus=64) == (2, False)  # bound by the launcher: the mask is ours


def test_free_port_is_a_port():
    assert 0 < env.free_port() < 65536


def test_onednn_cache_is_bounded_unless_the_user_set_it(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    env.bound_onednn_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
    env.bound_onednn_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "256"
