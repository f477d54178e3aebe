"""Diagnostics that never hang silently: mismatches, stalls, crashes and early exits (with timing bounds)."""
import pytest


def stall_lines(result):
    return [line for line in result.stderr.splitlines() if ": stall:" in line]


def test_mismatched_shapes_name_the_tensor_and_ranks(run_mpi):
    result = run_mpi(3, "faults.py", "mismatch")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = sorted(result.lines("MISMATCH"))
    assert len(lines) == 3  # every rank raises, then all carry on in step
    for line in lines:
        assert "tensor 'layer.w' differs across ranks: ranks 0,1: 'layer.w' float64[3]; rank 2: 'layer.w' float64[4]" in line
    assert sorted(result.lines("done")) == [f"done rank={r}" for r in range(3)]


def test_different_collectives_are_reported(run_mpi):
    result = run_mpi(3, "faults.py", "mismatch-op")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.lines("MISMATCH")
    assert len(lines) == 3
    assert all("ranks call different collectives: rank 0: bcast(0); ranks 1,2: allreduce('sum')" in l for l in lines)
    assert len(result.lines("done")) == 3


@pytest.mark.parametrize("thread_level, missing", [
    ("multiple", "rank 1 (busy outside ddl_runtime after collective #1)"),  # a watchdog thread answers
    ("funneled", "rank 1 (silent: hung or dead)"),  # no thread: ranks answer only while waiting
])
def test_stall_warning_names_the_missing_rank(run_mpi, thread_level, missing):
    result = run_mpi(3, "faults.py", "sleep", "3",
                     env={"DDL_STALL_WARNING_S": "0.5", "MPI4PY_RC_THREAD_LEVEL": thread_level})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = stall_lines(result)
    assert len(lines) == 1, result.stderr  # logged once, by the lowest waiting rank
    assert "rank 0/3: stall:" in lines[0]
    assert f"not arrived: {missing};" in lines[0]
    assert "waiting in it: ranks 0,2" in lines[0]
    assert "allreduce_n[2 tensors, first 'x'] (collective #2)" in lines[0]
    assert len(result.lines("done")) == 3
    assert result.seconds < 3 + 15


def test_stall_shutdown_aborts_the_job(run_mpi):
    result = run_mpi(3, "faults.py", "sleep", "60",
                     env={"DDL_STALL_WARNING_S": "0.5", "DDL_STALL_SHUTDOWN_S": "2"}, timeout=60)
    assert result.returncode != 0
    assert result.seconds < 15, f"took {result.seconds:.1f} s"
    assert "stall: aborting after DDL_STALL_SHUTDOWN_S=2" in result.stderr
    assert "not arrived: rank 1" in result.stderr


def test_early_exit_detected_without_watchdog_thread(run_mpi):
    result = run_mpi(3, "faults.py", "exit", env={"MPI4PY_RC_THREAD_LEVEL": "funneled"}, timeout=60)
    assert result.returncode != 0 and result.seconds < 30
    assert "rank 1 left (finalize or exit) after 1 collectives" in result.stderr


@pytest.mark.parametrize("what, message", [
    ("raise", "rank 1/3: uncaught exception: ValueError: boom on purpose; aborting the job"),
    ("raise-before-init", "rank 1/3: uncaught exception: ImportError: a module rank 1 lacks; aborting the job"),
    ("exit", "rank 1 left (finalize or exit) after 1 collectives while this rank waits in allreduce_n"),
    ("kill", None),
    ("sigkill", None),
])
def test_a_failing_rank_ends_the_whole_job(run_mpi, what, message):
    """No DDL_STALL_* set: the job must still end, non-zero, well within 30 s."""
    result = run_mpi(3, "faults.py", what, timeout=60)
    result.assert_ended_early(message, unreached="done")
    if what == "raise":
        assert result.stderr.count("uncaught exception") == 1  # printed once
        assert result.stderr.count("ValueError: boom on purpose\n") == 1  # the traceback, once
