"""Process sets and join on real MPI ranks."""
import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_process_sets_and_join(hvd_run, n):
    """Sets registered at init and later, collectives and barriers inside a set only, removal;
    join: joined ranks add zeros to the others' allreduces, allgather names the joined rank,
    join() returns the last rank to join, the same on every rank."""
    result = hvd_run(n, "core_sets_join.py")
    result.assert_ok(n, expected_checks=12)
