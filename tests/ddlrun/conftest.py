"""Helpers for ddlrun tests: run the real ``ddlrun`` (this interpreter's) with a clean
environment, and site profiles with fake GPUs so GPU mapping can be checked on a CPU box."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import pytest

HERE = Path(__file__).resolve().parent
SHOW_ENV = HERE / "programs" / "show_env.py"

FAKE_GPU_SITE = """\
name: {name}
description: this machine pretending to have {gpus} GPUs (tests only)
scheduler: local
launcher: mpiexec
platform: linux-64
node: {{sockets: 1, cores_per_socket: 2, threads_per_core: 1, gpus_per_socket: {gpus}}}
total_nodes: 8
gpu_binding: {binding}
"""

OPENMPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
               # one host: keep Open MPI off the network interfaces of the test machine
               "OMPI_MCA_btl": "self,vader", "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def ranks(self) -> List[Dict[str, str]]:
        """The JSON lines show_env.py printed, one per rank, sorted by RANK."""
        out = []
        for line in self.stdout.splitlines():
            if "ENV " in line:
                out.append(json.loads(line.split("ENV ", 1)[1]))
        return sorted(out, key=lambda d: int(d["RANK"]))

    @property
    def error_lines(self) -> List[str]:
        return [l for l in self.stderr.splitlines() if l.strip()]


@pytest.fixture
def site_dir(tmp_path):
    d = tmp_path / "sites"
    d.mkdir()
    (d / "fakegpu.yaml").write_text(FAKE_GPU_SITE.format(name="fakegpu", gpus=4, binding="per-rank"))
    (d / "fakegpu-lr.yaml").write_text(FAKE_GPU_SITE.format(name="fakegpu-lr", gpus=4, binding="local-rank"))
    return d


@pytest.fixture
def ddlrun(isolated_env, site_dir, tmp_path):
    """Run ``ddlrun ARGS`` in tmp_path; the fake-GPU sites are on WML_SITE_PATH."""
    def run(*args: str, env: Dict[str, str] | None = None, timeout: float = 60, cwd=None) -> Result:
        e = dict(isolated_env)
        e.pop("CUDA_VISIBLE_DEVICES", None)
        e.pop("OMPI_MCA_btl", None)
        e["WML_SITE_PATH"] = str(site_dir)
        if env:
            e.update(env)
        p = subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.cli", *args], cwd=cwd or tmp_path,
                           env=e, capture_output=True, text=True, timeout=timeout)
        return Result(p.returncode, p.stdout, p.stderr)
    return run


def openmpi_mpiexec() -> str | None:
    """Debian's Open MPI launcher, whatever else is on PATH (pip's MPICH usually is)."""
    for cand in ("/usr/bin/mpiexec.openmpi", "/usr/bin/mpirun.openmpi"):
        if os.path.exists(cand):
            return cand
    return None


@pytest.fixture
def show_env() -> List[str]:
    return [sys.executable, str(SHOW_ENV)]


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed on this machine")
    return path
