"""Fixtures shared by every test package.

Each test runs with its own HOME, XDG dirs and job directory, so no user configuration or
earlier job leaks in, and nothing is written outside tmp_path.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def isolated_env(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WML_", "LSB_", "SLURM_", "COBALT_", "DDL_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
               WML_JOBS_DIR=str(tmp_path / "wml-jobs"), WML_HOSTNAME="testhost.example.org")
    for k in list(os.environ):
        if k.startswith(("WML_", "LSB_", "SLURM_", "COBALT_", "DDL_")):
            monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


@pytest.fixture
def run_wml(isolated_env, tmp_path):
    """Run the real ``wml`` command (this interpreter's) in tmp_path; returns CompletedProcess."""
    def run(*args, env=None, cwd=None, timeout=120, input=None):
        e = dict(isolated_env)
        if env:
            e.update(env)
        return subprocess.run([sys.executable, "-m", "wmlce_tools", *args], cwd=cwd or tmp_path, env=e,
                              capture_output=True, text=True, timeout=timeout, input=input)
    return run


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``-n 2``, scripts/test), every test that uses a local Slurm cluster runs
    in one worker, one after another: they share the cluster's nodes and ports, and some count
    the jobs running on it.  ``--dist loadgroup`` honours the group; without xdist it is inert."""
    slurm = [item for item in items
             if "slurm" in item.nodeid.lower() or "local_slurm" in getattr(item, "fixturenames", ())]
    for item in slurm:
        item.add_marker(pytest.mark.xdist_group("slurm"))
    # the group first (about a quarter of the suite's time): the other worker takes the rest meanwhile,
    # instead of the group running alone at the end
    if slurm and hasattr(config, "workerinput"):     # an xdist worker (every worker orders alike)
        chosen = set(map(id, slurm))
        items[:] = slurm + [item for item in items if id(item) not in chosen]
