"""FlatAllreduce: a small bucket reduced every step straight from the shared-memory arena
(ddl_runtime/collectives/flat_allreduce.py), on real MPI ranks (mpi_scripts/flat_job.py)."""
import json

import numpy as np
import pytest

from ddl_runtime.errors import DDLInputError
from ddl_runtime.collectives.flat_allreduce import FlatAllreduce


@pytest.mark.parametrize("n, env", [(2, {}), (3, {}), (2, {"DDL_SHM": "0"}), (2, {"DDL_EMULATE_NODES": "2"})])
def test_values_equal_allreduce_n_bit_for_bit(run_mpi, n, env):
    """5 rounds per dtype/op/size with other collectives in between: allreduce_n's bits on every
    rank; the arena only for a one-host job and a bucket of at most SMALL_BYTES."""
    summary = run_mpi(n, "flat_job.py", "values", env=env, timeout=180).summary(n)
    shm = not env
    assert all(s["shm"] == shm for s in summary)
    if shm:
        for s in summary:
            assert s["arena"] == ["float32 avg x1", "float32 avg x38290", "float32 avg x65536",
                                  "float64 sum x1001", "int32 sum x77", "int64 sum x5000"]
    else:
        assert all(s["arena"] == [] for s in summary)


def test_a_mismatch_names_both_buckets_and_the_job_goes_on(run_mpi):
    summary = run_mpi(3, "flat_job.py", "mismatch", timeout=90).summary(3)
    for s in summary:
        assert "tensor.0" not in s["mismatch"]
        assert "'bucket.a'" in s["mismatch"] and "'bucket.b'" in s["mismatch"], s["mismatch"]
        assert "rank 0" in s["mismatch"] and "ranks 1,2" in s["mismatch"], s["mismatch"]


def test_start_refuses_without_a_fresh_buffer(run_mpi):
    summary = run_mpi(2, "flat_job.py", "misuse", timeout=90).summary(2)
    for s in summary:
        assert s["misuse"] == [
            "no buffer(): FlatAllreduce 'bucket.m': start() without buffer() just before it",
            "barrier in between: FlatAllreduce 'bucket.m': start() without buffer() just before it "
            "(another collective ran in between)"]


def test_a_stall_names_the_missing_rank_and_the_bucket(run_mpi):
    result = run_mpi(3, "flat_job.py", "stall", "3", env={"DDL_STALL_WARNING_S": "0.5"}, timeout=90)
    assert all(s["reduced"] for s in result.summary(3))  # every rank went on once rank 1 came
    stalls = [line for line in result.stderr.splitlines() if ": stall:" in line]
    assert len(stalls) == 1, result.stderr
    assert "not arrived: rank 1" in stalls[0] and "allreduce_n_async['bucket.slow']" in stalls[0]


@pytest.mark.parametrize("mode, message", [
    ("exit", "rank 1 left (finalize or exit) after 1 collectives while this rank waits in "
             "allreduce_n_async['bucket.left']"),
    ("kill", None),
])
def test_a_rank_that_leaves_ends_the_job(run_mpi, mode, message):
    """No DDL_STALL_* set: the ranks waiting in the barrier end the job, non-zero, within 30 s."""
    run_mpi(3, "flat_job.py", mode, timeout=60).assert_ended_early(message, unreached="NOT REACHED")


def test_the_timeline_shows_the_flat_reduction(run_mpi, tmp_path):
    trace = tmp_path / "trace.json"
    result = run_mpi(2, "flat_job.py", "values", env={"DDL_TIMELINE": str(trace)}, timeout=180)
    result.summary(2)
    for rank in (0, 1):
        events = json.loads((tmp_path / f"trace.rank{rank}.json").read_text())
        spans = [e for e in events if e.get("name") == "ALLREDUCE" and e["args"].get("algorithm") == "shm-flat"]
        assert len(spans) == 6 * 5 + (1 if rank == 0 else 0), len(spans)  # 6 buckets fit the arena
        assert {s["args"]["bytes"] for s in spans} >= {4, 38_290 * 4, 1001 * 8}


@pytest.mark.parametrize("args, message", [
    ((0, np.float32, "b"), "count must be a positive integer, got 0"),
    ((True, np.float32, "b"), "count must be a positive integer, got True"),
    ((10, np.float32, "b", "max"), "op 'max' is not one of sum, avg"),
    ((10, np.int64, "b", "avg"), "op 'avg' needs floating-point tensors; tensor 'b' is int64"),
    ((10, np.complex64, "b"), "unsupported dtype complex64"),
    ((10, "nonsense", "b"), "FlatAllreduce: 'nonsense' is not a numpy dtype"),
    ((2.5, np.float32, "b"), "count must be a positive integer, got 2.5"),
])
def test_bad_arguments_are_refused_before_any_communication(args, message):
    with pytest.raises(DDLInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        FlatAllreduce(*args)


def test_a_numpy_integer_count_is_taken():
    assert FlatAllreduce(np.int64(10), "float32", "b").count == 10
