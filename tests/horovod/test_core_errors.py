"""What Horovod reports as errors raises on every rank, in one line naming the tensor and the ranks."""


def test_mismatches_and_bad_input_raise_on_every_rank(hvd_run):
    """Shape, dtype, op, root, allgather trailing dims, group size: DDLMismatchError on both ranks
    within 30 s; bad splits, Adasum of integers, scalars, bad roots: ValueError before any communication;
    a name reused while in flight: ValueError, and the first request still completes."""
    result = hvd_run(2, "core_errors.py")
    result.assert_ok(2, expected_checks=15)
    assert result.seconds < 60


def test_a_tensor_one_rank_never_submits_is_named_then_given_up(hvd_run):
    result = hvd_run(2, "core_stall.py", env={"DDL_STALL_WARNING_S": "1", "DDL_STALL_SHUTDOWN_S": "3"})
    result.assert_ok(2, expected_checks=1)
    (stall,) = [c for c in result.checks("OK") if c.startswith("stall")]
    assert "allreduce 'lonely': waiting for rank 1 to submit it" in stall and "giving up" in stall
    assert "rank 0/2: allreduce 'lonely': waiting for rank 1 to submit it for 1 s" in result.stderr
