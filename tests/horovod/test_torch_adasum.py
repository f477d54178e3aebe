"""horovod.torch op=hvd.Adasum on real MPI: allreduce, grouped, async, in place, scale factors and
DistributedOptimizer(op=Adasum) (Horovod's delta optimizer, and its test_delta_optimizer on CPU),
against a numpy reference of Horovod's formula; Horovod's refusals (not a power of two ranks,
process sets, integer tensors).  The kernel's pieces without MPI at the end."""
import pytest

CHECKS = 25  # per rank, in mpi_scripts/torch_adasum.py


def test_adasum_on_two_ranks_matches_horovods_formula(hvd_run):
    hvd_run(2, "torch_adasum.py").assert_ok(2, expected_checks=CHECKS)


def test_adasum_on_four_ranks_halves_twice(hvd_run):
    hvd_run(4, "torch_adasum.py", timeout=240).assert_ok(4, expected_checks=CHECKS)


def test_adasum_on_two_ranks_of_open_mpi(hvd_run, openmpi):
    hvd_run(2, "torch_adasum.py", mpi=openmpi).assert_ok(2, expected_checks=CHECKS)


def test_adasum_refuses_three_ranks_on_every_rank_as_horovod_does(hvd_run):
    result = hvd_run(3, "torch_adasum.py")
    result.assert_ok(3, expected_checks=1)
    assert result.checks("OK") == ["non_power_of_two"] * 3


def test_an_adasum_exchange_names_the_rank_it_waits_for(hvd_run):
    result = hvd_run(2, "torch_adasum_stall.py", env={"DDL_STALL_WARNING_S": "1"})
    result.assert_ok(2, expected_checks=1)
    assert "allreduce 'slow' (Adasum): waiting for rank 1 to exchange its half for" in result.stderr, result.stderr


@pytest.mark.parametrize("dot,an,bn,want", [
    (0.0, 4.0, 9.0, (1.0, 1.0)),          # orthogonal: the sum
    (4.0, 4.0, 4.0, (0.5, 0.5)),          # equal: the average
    (2.0, 4.0, 1.0, (0.75, 0.0)),         # Horovod: 1 - a.b / (2 |.|^2) each
    (3.0, 1e-9, 2.0, (1.0, 0.25)),        # a squared norm below 1e-8 keeps coefficient 1
])
def test_pairwise_coefficients_are_horovods(dot, an, bn, want):
    from ddl_runtime.collectives import adasum
    assert adasum.coefficients(dot, an, bn) == pytest.approx(want)


def test_power_of_two():
    from ddl_runtime.collectives import adasum
    assert [n for n in range(1, 17) if adasum.is_power_of_two(n)] == [1, 2, 4, 8, 16]
    assert not adasum.is_power_of_two(0)
