"""Calls the runtime makes at init on behalf of rooms above it, which it must not import.

ddl_runtime/__init__.py registers checkpoint/stop.py's `install` here: the handler for
$WML_STOP_SIGNAL is in place as soon as the runtime starts, whether or not the script ever
imports ddl_runtime.checkpoint.  This module imports nothing of ddl_runtime (nor MPI).
"""
from __future__ import annotations

from typing import Callable, List

AT_INIT: List[Callable[[], None]] = []  # run in order by runtime.init(), once per runtime


def at_init(hook: Callable[[], None]) -> None:
    """Run `hook()` when the runtime starts (after the Runtime exists)."""
    if hook not in AT_INIT:
        AT_INIT.append(hook)
