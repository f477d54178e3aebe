"""LMS with DistributedOptimizer on 2 ranks over real MPI (pip's MPICH): gradient hooks unaffected,
parameters identical on both ranks and equal to training without LMS."""
import re
from pathlib import Path

import pytest
from helpers.mpi import run_script

WORKER = Path(__file__).resolve().parent / "workers" / "lms_distributed.py"


@pytest.mark.parametrize("flavour", ["ddl", "horovod"])
def test_two_ranks_keep_identical_parameters_with_lms(flavour):
    job = run_script(2, WORKER, flavour, env={"KERAS_BACKEND": "torch"}, timeout=240)
    # two ranks share one stdout pipe: a line of one may run into the other's, so match the words only
    results = re.findall(r"RESULT (\S+) (ok|FAIL)", job.stdout)
    assert job.returncode == 0 and len(results) == 4, job.stdout + job.stderr
    assert all(status == "ok" for _, status in results), job.stdout
