"""Installing pip packages with an env's own interpreter.

The env's python runs pip: ``<env>/bin/python -m pip`` when the env ships pip, otherwise this
machine's pip re-executed under the env's interpreter (``pip --python <env>/bin/python``), so
packages land in the env's site-packages and console scripts point at the env's python.

Installing into a staging directory bakes the staging path into console-script shebangs; the
caller relocates the new distributions to the final prefix afterwards
(:func:`wmlce_tools.env.relocate.relocate_dist`).
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from wmlce_tools.errors import WmlError


@dataclass
class PipResult:
    ok: bool
    output: str


def pip_command(python: Path) -> list[str]:
    probe = subprocess.run([str(python), "-c", "import pip"], capture_output=True)
    if probe.returncode == 0:
        return [str(python), "-m", "pip"]
    return [sys.executable, "-m", "pip", "--python", str(python)]


def pip_install(python: Path, requirements: list[str], no_deps: bool = False,
                extra_env: dict[str, str] | None = None, index_url: str | None = None,
                options: list[str] | None = None) -> PipResult:
    """``index_url``: the index the requirements come from (PyTorch's ROCm or XPU wheels);
    ``options``: more pip options (``--no-binary=mpi4py``)."""
    if not requirements:
        return PipResult(True, "")
    cmd = pip_command(python) + ["install", "--no-input", "--disable-pip-version-check",
                                 "--no-warn-script-location", "--no-compile"]
    if no_deps:
        cmd.append("--no-deps")
    if index_url:
        cmd += ["--index-url", index_url]
    cmd += list(options or [])
    cmd += list(requirements)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    env.update(extra_env or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return PipResult(proc.returncode == 0, (proc.stdout or "") + (proc.stderr or ""))


def last_error_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    return (errors or lines or ["pip failed"])[-1]


def require_python(prefix: Path) -> Path:
    from wmlce_tools.env.installed import env_python

    py = env_python(prefix)
    if py is None:
        raise WmlError(f"the spec has a pip section but the env at {prefix} has no python "
                       "(add python to its packages)")
    return py
