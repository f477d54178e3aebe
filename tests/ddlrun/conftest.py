"""Helpers for ddlrun tests: run the real ``ddlrun`` (this interpreter's) with a clean
environment, and site profiles with fake GPUs so GPU mapping can be checked on a CPU box."""
from __future__ import annotations

import subprocess
import sys
from typing import Dict

import pytest

from ddlrun_helpers import FAKE_GPU_SITE, Result


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
