"""The same runtime on Debian's Open MPI (apt-get install openmpi-bin): mpi4py picks the library at run time."""


def test_collectives_on_openmpi(run_mpi, openmpi):
    result = run_mpi(3, "check_collectives.py", "quick", mpi=openmpi)
    result.assert_all_ok(3)
    assert {t["algorithm"] for t in result.topologies()} == {"flat"}


def test_hierarchical_on_openmpi(run_mpi, openmpi):
    result = run_mpi(4, "check_collectives.py", "quick", mpi=openmpi,
                     env={"DDL_EMULATE_NODES": "2", "DDL_FUSION_MB": "0.5"})
    result.assert_all_ok(4)
    assert {t["algorithm"] for t in result.topologies()} == {"hierarchical"}


def test_stall_and_crash_on_openmpi(run_mpi, openmpi):
    stall = run_mpi(3, "faults.py", "sleep", "2", mpi=openmpi, env={"DDL_STALL_WARNING_S": "0.5"})
    assert stall.returncode == 0, stall.stderr[-2000:]
    assert "not arrived: rank 1 (busy outside ddl_runtime after collective #1)" in stall.stderr
    crash = run_mpi(3, "faults.py", "raise", mpi=openmpi, timeout=60)
    assert crash.returncode != 0 and crash.seconds < 30
    assert crash.stderr.count("uncaught exception: ValueError: boom on purpose") == 1
