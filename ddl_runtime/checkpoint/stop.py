"""The stop request and the agreement on it (see protocol.py).

A rank that receives the signal named by $WML_STOP_SIGNAL (or configure(stop_signal=...)) only
sets a flag: `requested()`.  `agree()` turns the flags of all ranks into one decision at one step
boundary, the same on every rank.  It costs nothing extra after a training step whose gradient
reduction already carried the flag (ddl_runtime.torch's and Horovod's DistributedOptimizer put
one "go on" slot at the tail of their last flat bucket: `slot_value()` / `post_folded()`); else
it is one tiny allreduce that also checks that every rank passed the same step.
"""
from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from ..core import log as _log
from ..errors import DDLInputError, DDLMismatchError
from .protocol import STOP_SIGNAL_ENV

GO = 1.0  # a rank's slot in a folded reduction: 1.0 = go on, 0.0 = this rank asks to stop


@dataclass
class _Stop:
    requested: bool = False
    asked_at: Optional[float] = None  # when the stop was asked (time.time()), the first time
    signal_name: Optional[str] = None  # the signal a handler is installed for
    configured: Optional[str] = None  # configure(stop_signal=...)
    folded: Optional[bool] = None  # the decision a step's reduction carried, not yet taken by agree()
    announced: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


_state = _Stop()


def signal_number(name: str) -> int:
    """SIGUSR1 for "USR1", "SIGUSR1" or "10"; one clear line for anything else."""
    text = str(name).strip().upper()
    if text.isdigit():
        return int(text)
    sig = getattr(signal, text if text.startswith("SIG") else "SIG" + text, None)
    if not isinstance(sig, signal.Signals):
        raise DDLInputError(f"{STOP_SIGNAL_ENV}={name!r} is not a signal name (expected e.g. USR1)")
    return int(sig)


def _handler(signum, _frame) -> None:
    _state.requested = True  # only a flag: printing here could re-enter a half-written stream
    if _state.asked_at is None:
        _state.asked_at = time.time()
    # Taken: ignore the signal from now on.  The launcher repeats it until the rank ends (one that
    # came before this handler existed must not be lost), and Python puts back the default action,
    # which kills, for signals with a Python handler when the interpreter exits (after a checkpoint).
    signal.signal(signum, signal.SIG_IGN)


def install() -> None:
    """Install the handler for the configured or $WML_STOP_SIGNAL signal (once; nothing when neither
    names one).  Only the main thread can install handlers; elsewhere this is left for later."""
    name = _state.configured or os.environ.get(STOP_SIGNAL_ENV) or None
    if name is None or name == _state.signal_name:
        return
    number = signal_number(name)
    if threading.current_thread() is not threading.main_thread():
        return
    with _state.lock:
        signal.signal(number, _handler)
        if _state.signal_name is None:
            atexit.register(_ignore_at_exit)
        _state.signal_name = name


def _ignore_at_exit() -> None:
    """At interpreter exit, ignore the stop signal if the handler never took it.  Python puts the
    killing default back for every signal that still has a Python handler when it finalizes, and
    the launcher repeats a stop signal until the rank has ended: one arriving while a rank that
    finished its run is exiting would kill it (status 138), and the chain would take the finished
    run for a failed segment."""
    name = _state.signal_name
    if name is None:
        return
    number = signal_number(name)
    if signal.getsignal(number) is _handler:
        signal.signal(number, signal.SIG_IGN)


def configure_signal(name: Optional[str]) -> None:
    _state.configured = name
    install()


def requested() -> bool:
    """Whether this rank received the stop signal."""
    install()
    return _state.requested


def request() -> None:
    """Ask for a stop on this rank as the signal would (for programs with their own timer)."""
    _state.requested = True
    if _state.asked_at is None:
        _state.asked_at = time.time()


def asked_at() -> Optional[float]:
    """When this rank was first asked to stop (time.time()), or None."""
    return _state.asked_at


def slot_value() -> float:
    """What this rank puts in a folded reduction's stop slot (reduced with op avg, or sum / size)."""
    return 0.0 if _state.requested else GO


def post_folded(fraction: float, size: int) -> None:
    """A step's reduction carried the slots: `fraction` = their mean (1.0 when no rank asked)."""
    _state.folded = fraction < GO - 0.5 / size


def agree(step: Optional[int] = None) -> bool:
    """Collective at a step boundary: True on every rank iff any rank requested a stop.

    `step` (optional): this rank's step; when the decision takes a collective of its own, ranks at
    different steps raise DDLMismatchError on every rank.
    """
    import numpy as np          # here, not at import: the job side imports this package for its names

    from ..state import runtime as _rt
    from ..collectives.ops import allreduce

    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 0):
        raise DDLInputError(f"agree(step={step!r}): step must be a non-negative integer")
    install()
    rt = _rt.current()
    folded, _state.folded = _state.folded, None
    if rt.size == 1:
        decision = _state.requested
    elif folded is not None:
        decision = folded
    else:
        s = -1.0 if step is None else float(step)
        # max of the stop flags (1 = asked), of step and of -step: one 3-element reduction
        out = allreduce(np.array([1.0 if _state.requested else 0.0, s, -s]), op="max", name="wml-stop-agreement")
        decision = out[0] > 0.5
        high, low = out[1], -out[2]
        if high != low:
            what = "no step" if low < 0 else f"step {int(low)}"
            raise DDLMismatchError(f"agree(step=...): ranks are at different steps ({what} to step {int(high)}); "
                                   "every rank must call agree() at the same step boundary")
    if decision and not _state.announced:
        _state.announced = True
        rt.write_stats("stopped")   # its record now, before the checkpoint (the walltime is near)
        if rt.rank == 0:
            at = "" if step is None else f" at step {step}"
            _log.log(f"stop agreed{at} (signal {_state.signal_name or 'request'} reached "
                     f"{'this rank' if rt.size == 1 else 'at least one rank'}): saving and exiting to resume")
    return bool(decision)
