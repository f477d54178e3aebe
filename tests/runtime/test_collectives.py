"""Every collective against numpy references on real MPI jobs (pip MPICH), flat algorithm."""
import pytest


@pytest.mark.parametrize("n", [1, 2, 3])
def test_numpy_collectives_match_references(run_mpi, n):
    result = run_mpi(n, "check_collectives.py")
    result.assert_all_ok(n)
    for t in result.topologies():
        assert t["size"] == n and t["algorithm"] == "flat"
        assert (t["local_size"], t["cross_size"]) == (n, 1)  # one host: one node by shared memory
        assert t["source"] == "shared-memory"


def test_torch_cpu_tensors_match_references(run_mpi):
    result = run_mpi(2, "check_collectives.py", "torch", "quick")
    result.assert_all_ok(2)


def test_small_buckets_chunk_large_tensors(run_mpi):
    """0.5 MB buckets: many buckets in flight and tensors reduced in place in chunks."""
    result = run_mpi(3, "check_collectives.py", "quick", env={"DDL_FUSION_MB": "0.5"})
    result.assert_all_ok(3)


def test_fusion_off_reduces_each_tensor_alone(run_mpi):
    result = run_mpi(2, "check_collectives.py", "quick", env={"DDL_FUSION_MB": "0"})
    result.assert_all_ok(2)
