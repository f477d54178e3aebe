"""resolve_env / activation_lines for `wml submit --env`: run the lines in a real bash."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from wmlce_tools.env.activation import activation_lines, resolve_env
from wmlce_tools.errors import WmlError


def test_resolve_by_name_and_path(created_env: Path, tmp_path: Path, monkeypatch):
    assert resolve_env("src") == created_env
    assert resolve_env(str(created_env)) == created_env
    # conda's env dirs are searched too (e.g. a site env cloned into ~/.conda/envs)
    conda_envs = tmp_path / "conda-envs"
    conda_envs.mkdir()
    shutil.copytree(created_env, conda_envs / "site-env", symlinks=True)
    assert resolve_env("site-env") == conda_envs / "site-env"


def test_resolve_unknown():
    with pytest.raises(WmlError, match="unknown environment 'nope'"):
        resolve_env("nope")
    with pytest.raises(WmlError, match="does not exist"):
        resolve_env("/no/such/env")
    with pytest.raises(WmlError, match="not a conda environment"):
        resolve_env("/tmp")


def test_activation_lines_in_bash(created_env: Path, tmp_path: Path):
    spaced = tmp_path / "with space $x"
    shutil.copytree(created_env, spaced, symlinks=True)
    for prefix in (created_env, spaced):
        script = "\n".join(["set -eu", "PATH=/usr/bin:/bin", *activation_lines(prefix),
                            'echo "P=$CONDA_PREFIX"', 'echo "B=$WML_BASE_ACTIVE"',
                            'echo "W=$(command -v wml-core)"', 'echo "N=$CONDA_DEFAULT_ENV"'])
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-c", script],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        values = dict(ln.split("=", 1) for ln in proc.stdout.splitlines())
        assert values["P"] == str(prefix)
        assert values["B"] == "2.0"
        assert values["W"] == f"{prefix}/bin/wml-core"
    assert values["N"] == str(spaced)  # not in an envs dir: named by its path, as conda does
