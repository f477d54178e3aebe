"""Tie a child process's life to its parent's (Linux ``prctl(PR_SET_PDEATHSIG)``).

Used as ``preexec_fn``: ddlrun's launcher gets SIGTERM if ddlrun dies (even by SIGKILL), and
each rank's program gets SIGKILL if its shim dies, so no process outlives the job.  Elsewhere
(not glibc) it does nothing.
"""
from __future__ import annotations

import signal
from typing import Callable

PR_SET_PDEATHSIG = 1


def on_parent_death(sig: int) -> Callable[[], None]:
    def preexec() -> None:
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))
        except Exception:  # pragma: no cover - not glibc
            pass
    return preexec


TERM_ON_PARENT_DEATH = on_parent_death(signal.SIGTERM)
KILL_ON_PARENT_DEATH = on_parent_death(signal.SIGKILL)
