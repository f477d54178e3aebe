"""Running py-rattler's coroutines from synchronous code, without a crash at interpreter exit.

py-rattler runs its work on tokio threads that call back into Python (to hand over a result,
report progress, drop the Python objects they held) for a moment *after* the awaited call has
returned.  If the interpreter is finalizing right then, CPython aborts the process ("Fatal
Python error: PyGILState_Release: thread state ... must be current when releasing", SIGABRT;
sometimes SIGSEGV): a clean ``wml: error: ...`` exit 2 becomes a crash.  py-rattler has no
shutdown call for its runtime (the same gap as PyO3/pyo3-async-runtimes#40), so the process
gives those threads a moment, once, at exit, while the interpreter is still whole: an
``atexit`` pause that releases the GIL.  Measured with three CPU hogs beside it (2 vCPUs): a
process that solves the test spec and exits at once crashed 3 times in 210 without the pause,
0 in 210 with it; ``wml env lock`` into a missing directory (which then still solved first)
crashed 2 times in 40.
"""
from __future__ import annotations

import asyncio
import atexit
import time
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")

SETTLE_S = 0.25
_settle_registered = False


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, plus (once per process) the exit pause for rattler's threads."""
    global _settle_registered
    if not _settle_registered:
        atexit.register(time.sleep, SETTLE_S)
        _settle_registered = True
    return asyncio.run(coro)
