"""Helpers for the Horovod example tests: run an example under `ddlrun --horovod` or
`wml submit --site local-slurm --horovod`, read the JSON it writes, always with a timeout."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@dataclass
class ExampleRun:
    returncode: int
    stdout: str
    stderr: str
    result: Optional[dict]

    def explain(self) -> str:
        return f"exit {self.returncode}\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}"


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This environment without job/runtime settings, with Horovod's usual CPU knobs."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DDL_", "WML_", "SLURM_", "HOROVOD_", "OMPI_", "PMI_"))}
    env.update(OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow",
               DDL_STALL_SHUTDOWN_S="90", PYTHONPATH=str(REPO))
    env.update(extra or {})
    return env


def ddlrun_example(script: str, ranks: int, out: Path, *args: str, timeout: float = 240,
                   env: Optional[Dict[str, str]] = None) -> ExampleRun:
    cmd = [sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--horovod", "-n", str(ranks),
           sys.executable, str(EXAMPLES / script), "--json", str(out), *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=clean_env(env),
                           cwd=str(out.parent), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s: {str(exc.stdout)[-2000:]}")
    result = json.loads(out.read_text()) if out.exists() else None
    return ExampleRun(p.returncode, p.stdout, p.stderr, result)


def slurm_example(slurm, tmp_path: Path, script: str, out: Path, *args: str, timeout: float = 300) -> ExampleRun:
    """`wml submit --site local-slurm --horovod --nodes 2 --wait` of an example (1 rank per node)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = clean_env({"SLURM_CONF": str(slurm.conf), "WML_SLURM_BASE": str(slurm.base), "HOME": str(home),
                     "XDG_DATA_HOME": str(home / ".local/share"), "XDG_CONFIG_HOME": str(home / ".config"),
                     "WML_JOBS_DIR": str(tmp_path / "wml-jobs")})
    cmd = [sys.executable, "-m", "wmlce_tools", "submit", "--site", "local-slurm", "--horovod", "--nodes", "2",
           "--ranks-per-node", "1", "-t", "10", "-J", "hvd-example", "--wait",
           "--export", "KERAS_BACKEND=tensorflow", "--export", "OMP_NUM_THREADS=1",
           "--export", "TF_CPP_MIN_LOG_LEVEL=2", "--export", "DDL_STALL_SHUTDOWN_S=90",
           str(EXAMPLES / script), "--json", str(out), *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=str(tmp_path), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"wml submit did not finish within {timeout} s: {str(exc.stdout)[-2000:]}")
    result = json.loads(out.read_text()) if out.exists() else None
    return ExampleRun(p.returncode, p.stdout, p.stderr, result)


def load_slurm_fixture():
    """tests/slurm/conftest.py's `local_slurm` session fixture (starts or reuses the shared cluster)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("wml_tests_slurm_conftest", REPO / "tests" / "slurm" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.local_slurm
