"""Helpers for the Horovod-layer tests: real MPI jobs (pip's MPICH) running scripts in mpi_scripts/.

Scripts print `OK <check>` / `FAIL <check>: <why>` lines and `DONE` at the end; `HvdResult`
parses them.  Launcher and DDL_/HOROVOD_ settings of an enclosing job never leak in.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.mpi import FOREIGN, MpiJob, openmpi_available, run_script

SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"


class HvdResult(MpiJob):
    def checks(self, status: str) -> list:
        """The text after each `OK `/`FAIL ` marker (ranks' lines may arrive glued together by mpiexec)."""
        return [m.strip() for m in re.findall(rf"{status} (.*?)(?=OK |FAIL |DONE|\n|$)", self.stdout)]

    def assert_ok(self, n: int, expected_checks: int = 1) -> None:
        """Exit 0, DONE from every rank, no FAIL line, and at least `expected_checks` OK lines per rank."""
        tail = f"\n--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        assert not self.checks("FAIL"), "\n".join(self.checks("FAIL")[:40]) + tail
        assert self.stdout.count("DONE") == n, tail
        assert len(self.checks("OK")) >= n * expected_checks, tail
        assert self.returncode == 0, tail


def hvd_mpirun(n: int, script: str, *args: str, env: dict | None = None, timeout: float = 120,
               mpi: str = "mpich") -> HvdResult:
    """Run mpi_scripts/<script> on n ranks: pip's MPICH, or (mpi="openmpi") Debian's Open MPI."""
    return run_script(n, SCRIPTS / script, *args, env=env, timeout=timeout, mpi=mpi,
                      foreign=FOREIGN + ("HOROVOD_",), result=HvdResult)


@pytest.fixture
def hvd_run():
    return hvd_mpirun


@pytest.fixture
def openmpi():
    """Skips when Debian's Open MPI is absent (an optional second MPI: apt-get install openmpi-bin)."""
    if not openmpi_available():
        pytest.skip("Debian's Open MPI is not installed (apt-get install openmpi-bin)")
    return "openmpi"
