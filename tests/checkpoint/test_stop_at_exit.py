"""A chained job's stop signal that comes while a finished rank is exiting must not kill it.

ddlrun's rank shim repeats the stop signal until the program has ended; Python puts the killing
default back for every signal that still has a Python handler when the interpreter finalizes.  A
rank that finished its run without ever taking the signal, and got it while exiting, died with
status 138 (128 + SIGUSR1): the segment that finished the run counted as failed, FINISHED was not
written and the next segment trained again from the last checkpoint.  Here the signal is sent from
an object's finalizer, which runs after the interpreter has reset the handlers (deterministic).
"""
from __future__ import annotations

import subprocess
import sys

from helpers.mpi import REPO

PROGRAM = """
import os, signal
import ddl_runtime.checkpoint        # installs the runtime's handler for $WML_STOP_SIGNAL

class SignalAtTeardown:              # collected after the interpreter has reset Python's handlers
    def __del__(self, kill=os.kill, pid=os.getpid(), sig=signal.SIGUSR1):
        kill(pid, sig)

keep = SignalAtTeardown()
print("finished", flush=True)
"""


def test_a_stop_signal_during_interpreter_exit_leaves_the_exit_status_0(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "WML_STOP_SIGNAL": "USR1", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "finished\n"), proc.stderr[-2000:]
