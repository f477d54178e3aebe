"""Process sets and join on real MPI ranks."""
import pytest


@pytest.mark.parametrize("n", [2, 3])
def test_process_sets_and_join(hvd_run, n):
    """Sets registered at init and later, collectives and barriers inside a set only, removal;
    join: joined ranks add zeros to the others' allreduces, allgather names the joined rank,
    join() returns the last rank to join, the same on every rank."""
    result = hvd_run(n, "core_sets_join.py")
    result.assert_ok(n, expected_checks=12)


def test_static_process_sets_and_unknown_ids_as_horovod(hvd_run):
    """Issue 36 on horovod.torch: duplicates in hvd.init's list are a ValueError on every rank and
    a later init succeeds (ids 1, 2; a permutation names the same set; the global set keeps id 0
    and all ranks); a collective on a never registered id, or a removed set, is a ValueError."""
    result = hvd_run(2, "core_static_sets.py", env={"KERAS_BACKEND": "torch"}, timeout=180)
    result.assert_ok(2, expected_checks=21)
