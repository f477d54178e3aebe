"""Real MPI jobs for the tests: pip's MPICH wheel (its mpiexec on PATH) or Debian's Open MPI.

The job's settings come only from ``env``: launcher and scheduler variables of an enclosing job
(and the prefixes a caller adds, e.g. HOROVOD_) never leak in.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, Type, TypeVar

REPO = Path(__file__).resolve().parents[2]
FOREIGN = ("DDL_", "SLURM_", "PMI_", "PMIX_", "OMPI_", "HYDRA_", "MPI_LOCAL", "JSM_", "ALPS_", "LSB_", "MPI4PY_")
OPENMPI_MPIEXEC = "/usr/bin/mpiexec.openmpi"  # Debian's openmpi-bin (scripts/test installs it)
OPENMPI_LIBMPI = "libmpi.so.40"  # Open MPI 4.x; mpi4py loads it when MPI4PY_LIBMPI names it


@dataclass
class MpiJob:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


J = TypeVar("J", bound=MpiJob)


def openmpi_available() -> bool:
    return Path(OPENMPI_MPIEXEC).exists() and any(Path("/usr/lib").glob(f"*/{OPENMPI_LIBMPI}"))


def run_script(n: int, script: Path, *args: str, env: dict | None = None, timeout: float = 90,
               mpi: str = "mpich", foreign: Sequence[str] = FOREIGN, result: Type[J] = MpiJob,
               prefix: Sequence[str] = ()) -> J:
    """Run ``python script args`` on n ranks from the repository root, as ``result``.

    mpi="mpich": pip's MPICH wheel.  mpi="openmpi": Debian's Open MPI, with mpi4py pointed at
    its libmpi at run time.  `prefix` runs the launcher under another command (e.g. unshare).
    """
    environment = {k: v for k, v in os.environ.items() if not k.startswith(tuple(foreign))}
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
    cmd = [*prefix, *launcher, "-n", str(n), sys.executable, str(script), *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=environment, cwd=str(REPO))
    return result(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
