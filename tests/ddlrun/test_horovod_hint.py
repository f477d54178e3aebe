"""A Horovod script launched without --horovod: the ranks' "No module named 'horovod'" gets one
hint line from ddlrun (issue 40.6).  Real ddlrun, real MPI, 2 ranks."""
from __future__ import annotations

import subprocess
import sys

DDLRUN = [sys.executable, "-c", "from wmlce_tools.ddlrun.cli import main; main()"]


def _run(tmp_path, isolated_env, *args):
    prog = tmp_path / "hvd_script.py"
    prog.write_text("import horovod.torch as hvd\nhvd.init()\nimport sys\nsys.exit(3)\n")
    env = dict(isolated_env, KERAS_BACKEND="torch")
    return subprocess.run([*DDLRUN, *args, "-n", "2", sys.executable, str(prog)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_missing_horovod_module_names_the_flag(tmp_path, isolated_env):
    proc = _run(tmp_path, isolated_env)
    assert proc.returncode == 1, proc.stderr
    hints = [ln for ln in proc.stderr.splitlines() if ln.startswith("ddlrun: hint:")]
    assert len(hints) == 1 and "`ddlrun --horovod`" in hints[0], proc.stderr


def test_with_the_flag_no_hint(tmp_path, isolated_env):
    proc = _run(tmp_path, isolated_env, "--horovod")
    assert proc.returncode == 3, proc.stderr       # the script ran on ddl_runtime's horovod.torch
    assert "ddlrun: hint" not in proc.stderr
