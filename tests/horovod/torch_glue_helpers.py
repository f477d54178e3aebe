"""Running real jobs for the Horovod torch-glue tests: ``ddlrun`` on this machine, with a timeout."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
DDLRUN = [sys.executable, "-c", "from wmlce_tools.ddlrun.cli import main; main()"]


@dataclass
class Job:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return f"--- stdout ---\n{self.stdout[-5000:]}\n--- stderr ---\n{self.stderr[-5000:]}"

    def results(self) -> Dict[str, Dict[int, str]]:
        """``RESULT case ok|FAIL why`` lines -> {case: {rank: 'ok' or the failure}}."""
        out: Dict[str, Dict[int, str]] = {}
        for m in re.finditer(r"^\[(\d+)\] RESULT (\S+) (.*)$", self.stdout, re.M):
            out.setdefault(m.group(2), {})[int(m.group(1))] = m.group(3)
        return out


def clean_env(extra: Optional[dict] = None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DDL_", "HOROVOD_", "WML_HOROVOD", "OMPI_", "PMI_", "SLURM_"))}
    env["PYTHONPATH"] = str(REPO)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # pip's mpiexec
    env["OMP_NUM_THREADS"] = "1"
    env["DDL_STALL_SHUTDOWN_S"] = "60"  # a hang becomes an abort, not a stuck test
    env.update(extra or {})
    return {k: v for k, v in env.items() if v is not None}  # None in `extra` removes a variable


def ddlrun(args: Sequence[str], env: Optional[dict] = None, timeout: float = 240, cwd: Optional[Path] = None) -> Job:
    cmd: List[str] = [*DDLRUN, *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=clean_env(env),
                              cwd=str(cwd or REPO))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s (a hang?)\n{exc.stdout}\n{exc.stderr}")
    return Job(proc.returncode, proc.stdout, proc.stderr)
