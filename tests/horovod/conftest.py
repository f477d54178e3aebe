"""Helpers for the Horovod-layer tests: real MPI jobs (pip's MPICH) running scripts in mpi_scripts/.

Scripts print `OK <check>` / `FAIL <check>: <why>` lines and `DONE` at the end; `HvdResult`
parses them.  Launcher and DDL_/HOROVOD_ settings of an enclosing job never leak in.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"
FOREIGN = ("DDL_", "HOROVOD_", "SLURM_", "PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCAL", "JSM_", "ALPS_",
           "LSB_", "MPI4PY_")


@dataclass
class HvdResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

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


OPENMPI_MPIEXEC = "/usr/bin/mpiexec.openmpi"  # Debian's openmpi-bin (scripts/test installs it)
OPENMPI_LIBMPI = "libmpi.so.40"


def hvd_mpirun(n: int, script: str, *args: str, env: dict | None = None, timeout: float = 120,
               mpi: str = "mpich") -> HvdResult:
    """Run mpi_scripts/<script> on n ranks: pip's MPICH, or (mpi="openmpi") Debian's Open MPI."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), environment.get("PYTHONPATH")]))
    environment.setdefault("OMP_NUM_THREADS", "1")
    if mpi == "openmpi":
        launcher = [OPENMPI_MPIEXEC, "--oversubscribe"]
        environment.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                           MPI4PY_LIBMPI=OPENMPI_LIBMPI)
    else:
        mpiexec = shutil.which("mpiexec")
        assert mpiexec, "mpiexec not found: install the mpich wheel (pip install mpich)"
        launcher = [mpiexec]
    environment.update(env or {})
    cmd = [*launcher, "-n", str(n), sys.executable, str(SCRIPTS / script), *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=environment, cwd=str(REPO))
    return HvdResult(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


@pytest.fixture
def hvd_run():
    return hvd_mpirun


@pytest.fixture
def openmpi():
    """Skips when Debian's Open MPI is absent (an optional second MPI: apt-get install openmpi-bin)."""
    if not (Path(OPENMPI_MPIEXEC).exists() and any(Path("/usr/lib").glob(f"*/{OPENMPI_LIBMPI}"))):
        pytest.skip("Debian's Open MPI is not installed (apt-get install openmpi-bin)")
    return "openmpi"
