"""ddlrun's hint lines: a Horovod script launched without --horovod (its ranks' "No module named
'horovod'", issue 40.6); Open MPI refusing to run as root (issue 40.12).  Real ddlrun and MPI,
2 ranks; Open MPI through a test double."""
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


OPENMPI_ROOT_BANNER = """--------------------------------------------------------------------------
mpirun has detected an attempt to run as root.

Running as root is *strongly* discouraged as any mistake (e.g., in
defining TMPDIR) or bug can result in catastrophic damage to the OS
file system, leaving your system in an unusable state.
--------------------------------------------------------------------------
"""


def test_open_mpi_refusing_root_is_explained_with_the_mpich_remedy(tmp_path, isolated_env):
    """A TEST DOUBLE for Debian's Open MPI mpirun (not installed here): its --version and its
    root refusal banner, as Open MPI 4 prints them."""
    fake = tmp_path / "mpirun"
    banner = tmp_path / "banner.txt"
    banner.write_text(OPENMPI_ROOT_BANNER)
    fake.write_text(f'#!/bin/bash\nif [ "$1" = --version ]; then echo "mpirun (Open MPI) 4.1.4"; exit 0; fi\n'
                    f'cat {banner} >&2\nexit 1\n')
    fake.chmod(0o755)
    proc = subprocess.run([*DDLRUN, "--mpiexec", str(fake), "-n", "2", "true"], cwd=tmp_path, env=isolated_env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    hint = [ln for ln in proc.stderr.splitlines() if ln.startswith("ddlrun: hint:")]
    assert len(hint) == 1 and "pip's MPICH" in hint[0] and "OMPI_ALLOW_RUN_AS_ROOT=1" in hint[0], proc.stderr
