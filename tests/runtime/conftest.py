"""Helpers for ddl_runtime tests: real MPI jobs launched with mpiexec (pip's MPICH)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"


@dataclass
class MpiResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def lines(self, prefix: str) -> list:
        return [line for line in self.stdout.splitlines() if line.startswith(prefix)]

    def json_lines(self, prefix: str) -> list:
        return [json.loads(line[len(prefix):]) for line in self.lines(prefix)]

    def topologies(self) -> list:
        (summary,) = self.json_lines("SUMMARY ")
        return summary

    def assert_all_ok(self, n: int) -> None:
        """check_collectives.py's verdict: exit 0, a summary from all n ranks, no failures."""
        summaries = self.json_lines("SUMMARY ")
        assert len(summaries) == 1, self.stdout[-3000:] + self.stderr[-3000:]
        ranks = summaries[0]
        assert sorted(t["rank"] for t in ranks) == list(range(n))
        failures = [f"rank {t['rank']}: {f}" for t in ranks for f in t["failures"]]
        assert not failures, "\n".join(failures[:50])
        assert self.returncode == 0, self.stderr[-3000:]


# the job's settings come only from `env`; launcher variables from an enclosing job must not leak in
FOREIGN = ("DDL_", "SLURM_", "PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCAL", "JSM_", "ALPS_", "LSB_", "MPI4PY_")
OPENMPI_MPIEXEC = "/usr/bin/mpiexec.openmpi"  # Debian's openmpi-bin
OPENMPI_LIBMPI = "libmpi.so.40"  # Open MPI 4.x; mpi4py loads it when MPI4PY_LIBMPI names it


def openmpi_available() -> bool:
    return Path(OPENMPI_MPIEXEC).exists() and any(Path("/usr/lib").glob(f"*/{OPENMPI_LIBMPI}"))


def mpirun(n: int, script: str, *args: str, env: dict | None = None, timeout: float = 90,
           mpi: str = "mpich") -> MpiResult:
    """Run mpi_scripts/<script> on n ranks; DDL_* (and launcher) variables come only from `env`.

    mpi="mpich": pip's MPICH wheel (its mpiexec on PATH).  mpi="openmpi": Debian's Open MPI,
    with mpi4py pointed at its libmpi at run time.
    """
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
    return MpiResult(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


@pytest.fixture
def run_mpi():
    return mpirun


@pytest.fixture
def openmpi():
    """Skips when Debian's Open MPI is absent (it is an optional second MPI: apt-get install openmpi-bin)."""
    if not openmpi_available():
        pytest.skip("Debian's Open MPI is not installed (apt-get install openmpi-bin)")
    return "openmpi"
