"""``wml env verify`` of a virtualenv, as --env takes one (issue 40.12): pip's RECORD hashes, the
scripts' python, --import.  A real venv (python -m venv), its pip's files edited."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _wml(*args, env):
    return subprocess.run([sys.executable, "-m", "wmlce_tools", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_verify_a_venv(tmp_path, isolated_env):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    ok = _wml("env", "verify", str(venv), "--import", "json", env=isolated_env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(f"{venv}: OK (") and "1 imports" in ok.stdout
    target = next(venv.glob("lib/python*/site-packages/pip/__init__.py"))
    target.write_text(target.read_text() + "# edited\n")
    bad = _wml("env", "verify", str(venv), "--import", "no_such_module_xyz", env=isolated_env)
    assert bad.returncode == 1
    assert "pip/__init__.py: sha256 mismatch" in bad.stdout and "import no_such_module_xyz" in bad.stdout
    assert "--force-reinstall --no-deps pip==" in bad.stderr and "not a conda environment" not in bad.stderr
