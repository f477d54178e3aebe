"""Helpers for the framework tests: real jobs under pip's MPICH `mpiexec`, always with a timeout."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"
EXAMPLES = REPO / "examples"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"

    def cases(self) -> dict:
        """`CASE name: message` lines printed by the bad-input workers."""
        out = {}
        for line in self.stdout.splitlines():
            if line.startswith("CASE "):
                name, _, message = line[5:].partition(": ")
                out[name] = message
        return out


def _env(extra: Optional[dict] = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env["KERAS_BACKEND"] = "torch"
    env.setdefault("DDL_STALL_SHUTDOWN_S", "60")  # a hang becomes an abort, not a stuck test
    env.update(extra or {})
    return env


def _timed(cmd: list, timeout: float, env: Optional[dict]) -> Run:
    """Run `cmd` from the repository with _env(env); a timeout fails the test with both outputs' tails."""
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(env), cwd=str(REPO))
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s (a hang?)\n{out[-3000:]}\n{err[-3000:]}")
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


def run(n: Optional[int], script: Path, *args: str, timeout: float = 150, env: Optional[dict] = None) -> Run:
    """Run `script` on n ranks with mpiexec, or as a plain `python` process when n is None."""
    if n is None:
        cmd = [sys.executable, str(script), *args]
    else:
        mpiexec = shutil.which("mpiexec")
        assert mpiexec, "mpiexec not found: install the mpich wheel (pip install mpich)"
        cmd = [mpiexec, "-n", str(n), sys.executable, str(script), *args]
    return _timed(cmd, timeout, env)


def read_json(path: Path) -> dict:
    with open(path) as fh:
        return json.load(fh)


def ddlrun(n: int, script: Path, *args: str, timeout: float = 150, env: Optional[dict] = None) -> Run:
    """Run `script` on n ranks through the real `ddlrun` launcher (this interpreter's), with a timeout."""
    launcher = Path(sys.executable).parent / "ddlrun"
    cmd = [str(launcher) if launcher.exists() else shutil.which("ddlrun") or "ddlrun",
           "-n", str(n), sys.executable, str(script), *args]
    return _timed(cmd, timeout, env)
