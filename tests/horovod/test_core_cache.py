"""The response cache: cached requests announced by id, small allreduces' data in the round."""
import pytest

STALL = {"DDL_STALL_SHUTDOWN_S": "30"}  # a hang fails in 30 s


@pytest.mark.parametrize("n", [2, 3])
def test_cached_requests_keep_every_guarantee(hvd_run, n):
    """Repeats are carried in the round and bit-equal to the table path; larger repeats skip the table; unnamed calls are cached too;
    any submit order; a shape
    change, a refusal of a cached name, a joined rank: as on the table path."""
    hvd_run(n, "core_cache.py", env=STALL).assert_ok(n, expected_checks=33)


def test_horovod_cache_capacity_0_on_one_rank_turns_the_cache_off_everywhere(hvd_run):
    """HOROVOD_CACHE_CAPACITY=0 (Horovod's switch) on the last rank only: the set agrees on no
    cache (ranks that numbered ids differently could not decode each other), and the table path
    keeps every guarantee."""
    hvd_run(2, "core_cache.py", "off", env={**STALL, "WML_TEST_LAST_RANK": "1"}).assert_ok(2, expected_checks=35)


def test_cached_ids_on_the_mpi_rounds(hvd_run):
    """DDL_EMULATE_NODES=2: no shared memory; ids in the MPI rounds, nothing carried."""
    hvd_run(2, "core_cache.py", "mpi", env={**STALL, "DDL_EMULATE_NODES": "2"}).assert_ok(2, expected_checks=33)
