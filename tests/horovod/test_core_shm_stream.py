"""The global set's negotiated allreduces on shared memory of their own, beside native collectives."""
import pytest

STALL = {"DDL_STALL_SHUTDOWN_S": "30"}  # a hang (the streams waiting on each other) fails in 30 s


@pytest.mark.parametrize("n", [2, 3])
def test_negotiated_and_native_collectives_in_any_order(hvd_run, n):
    """Ranks reach native allreduce_n / bcast_n and hvd.allreduce / grouped_allreduce in different
    orders (small and large tensors, async then native); results bit-equal to the MPI path's."""
    hvd_run(n, "core_shm_stream.py", env=STALL).assert_ok(n, expected_checks=16)


def test_emulated_nodes_keep_the_mpi_path(hvd_run):
    """DDL_EMULATE_NODES=2: no shared memory anywhere; the same script runs on MPI."""
    hvd_run(2, "core_shm_stream.py", "mpi", env={**STALL, "DDL_EMULATE_NODES": "2"}).assert_ok(2, expected_checks=16)
