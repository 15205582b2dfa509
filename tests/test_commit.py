"""Tier 2 (COMM_SELF): the one protocol that commits a folder several ranks write (`mpi.commit.commit_folder`),
shared by checkpoint generations and the predictions folder; its multi-rank failures are replayed by
test_checkpoint_generations (full disk on one rank) and test_predict (an unwritable --out)."""
import pytest

from mpignn.mpi.commit import commit_folder, manifest_bytes


@pytest.fixture()
def comm():
    from mpi4py import MPI

    return MPI.COMM_SELF


def _run(comm, *, own_fails=False, finish_fails=False):
    seen = []

    def write_own():
        if own_fails:
            raise OSError(28, "No space left on device")
        seen.append("own")
        return 7

    def prepare(reports):
        seen.append(("prepare", reports))
        return {"n": sum(reports)}

    def finish(payload):
        if finish_fails:
            raise PermissionError(13, "Permission denied")
        seen.append(("finish", payload))

    problem = commit_folder(comm, write_own, prepare, finish, writer=True, cleanup=lambda: seen.append("cleanup"))
    return problem, seen


def test_a_complete_commit_runs_each_step_once(comm):
    assert _run(comm) == ("", ["own", ("prepare", [7]), ("finish", {"n": 7})])


def test_a_failed_write_skips_the_manifest_and_cleans_up(comm):
    problem, seen = _run(comm, own_fails=True)
    assert problem == "rank 0: OSError: [Errno 28] No space left on device" and seen == ["cleanup"]
    problem, seen = _run(comm, finish_fails=True)
    assert problem.startswith("rank 0: PermissionError") and seen[-1] == "cleanup"


def test_manifest_bytes_are_stable():
    assert manifest_bytes({"b": 1, "a": [1, 2]}) == b'{\n "a": [\n  1,\n  2\n ],\n "b": 1\n}\n'
