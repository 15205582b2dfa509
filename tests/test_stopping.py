"""The SIGUSR2 flag and the Slurm requeue request (scontrol imitated on PATH)."""
import os
import signal
import stat

from mpignn.stopping import EXIT_STOPPED, StopSignal, requeue


def test_the_handler_only_sets_a_flag():
    before = signal.getsignal(signal.SIGUSR2)
    stop = StopSignal().install()
    try:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGUSR2)
        assert stop.requested and stop.name == "SIGUSR2" and EXIT_STOPPED == 75
    finally:
        stop.uninstall()
    assert signal.getsignal(signal.SIGUSR2) is before


def test_requeue_runs_scontrol_with_the_job_id(tmp_path):
    log = tmp_path / "calls"
    fake = tmp_path / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    assert requeue(env) == "requeued Slurm job 4242" and log.read_text() == "requeue 4242\n"
    assert requeue({"PATH": os.environ["PATH"]}).startswith("not requeued: SLURM_JOB_ID is not set")
    fake.write_text("#!/bin/sh\necho 'Requested operation is presently disabled' >&2\nexit 1\n")
    assert "exited 1: Requested operation is presently disabled" in requeue(env)
