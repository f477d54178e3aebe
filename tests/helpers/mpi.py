"""Real MPI jobs for the tests: pip's MPICH wheel (its mpiexec on PATH) or Debian's Open MPI.

The job's settings come only from ``env``: launcher and scheduler variables of an enclosing job
(and the prefixes a caller adds, e.g. HOROVOD_) never leak in.
"""
from __future__ import annotations

import os
import shutil
import signal
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
    # Its own session, so that a job past `timeout` goes whole (launcher, proxies and ranks), and
    # the failure shows what the job had printed by then.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                            cwd=str(REPO), start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended just then
            pass
        stdout, stderr = proc.communicate()
        raise AssertionError(f"{script.name} {' '.join(args)} on {n} ranks did not end within {timeout:g} s "
                             f"(killed)\n--- stdout (end) ---\n{stdout[-3000:]}\n--- stderr (end) ---\n"
                             f"{stderr[-3000:]}") from None
    return result(proc.returncode, stdout, stderr, time.monotonic() - start)
