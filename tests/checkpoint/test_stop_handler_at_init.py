"""init() installs the $WML_STOP_SIGNAL handler even when the program never imports
ddl_runtime.checkpoint: the runtime (state/) cannot import checkpoint/, so ddl_runtime/__init__.py
registers the install with state/hooks.py and the runtime runs it at init (issue 37)."""
from __future__ import annotations

import os
import subprocess
import sys

from helpers.mpi import REPO

PROGRAM = """
import os, signal, sys, time
import numpy as np
import ddl_runtime as ddl
ddl.init()                                    # one rank, no launcher
os.kill(os.getpid(), signal.SIGUSR1)          # without the handler: the default action kills
time.sleep(0.05)
from ddl_runtime import checkpoint
print("requested", checkpoint.requested(), flush=True)
ddl.finalize()
"""


def test_init_installs_the_stop_handler_without_the_program_importing_checkpoint(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDL_", "PMI_", "OMPI_", "HYDRA_", "WML_"))}
    env.update(PYTHONPATH=str(REPO), WML_STOP_SIGNAL="USR1", HOME=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "requested True\n"), (proc.returncode, proc.stderr[-2000:])
