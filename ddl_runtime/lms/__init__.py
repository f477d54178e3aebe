"""Large Model Support for torch: train models whose activations do not fit in GPU memory.

    import ddl_runtime.lms as lms
    session = lms.enable(model, budget=0.9)   # bytes, a fraction of the GPU, or 0: all this process may use
    ...train as usual...
    print(lms.stats(model))                    # kept / swapped / recomputed bytes, peak, waits

    with lms.enabled(model, budget=16 << 30):  # the same, undone at the end of the block
        ...

WML CE's switches (``torch.cuda.set_enabled_lms(True)`` and its twins) are installed onto
``torch.cuda`` by ``import ddl``, ``import ddl_runtime`` (when torch is imported) and by
``ddlrun --lms`` / ``WML_LMS=1`` (no import needed): see ``wmlce.py``.  Importing this package
does not import torch.
"""
from __future__ import annotations

import contextlib
import weakref

from ..core import stats as _run_stats

_sessions: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

__all__ = ["enable", "disable", "enabled", "stats", "get_session", "LmsError", "Stats", "make_plan"]


def enable(model, budget=0, size=None, *, optimizer=None, transfer=None, prefetch_bytes=None, segments=True):
    """Turn LMS on for ``model`` (an ``nn.Module``); returns its Session.  ``budget``: bytes (int),
    a fraction of the device (float in (0, 1]), or 0: all the memory this process may use.
    ``size``: tensors smaller than this are never swapped (default: ``torch.cuda.get_size_lms()``,
    1 MB).  ``optimizer``: lets the budget check count its state from the first step.  ``segments``:
    blocks chained in an ``nn.Sequential`` may be recomputed as one segment (False: block by block)."""
    from . import config
    from .session import Session, _compiled_note, _is_keras, warn_once

    if type(model).__name__ == "OptimizedModule":       # torch.compile(model): hooks do not apply inside
        _compiled_note()
        return None
    if _is_keras(model):
        warn_once("keras", "LMS: Keras models run through Keras's own layer calls: LMS is off for them "
                           "(it applies to torch nn.Module models)")
        return None
    if model in _sessions:
        _sessions[model].remove()
    s = Session(model, budget, config.SETTINGS.size if size is None else size, transfer, optimizer, prefetch_bytes,
                segments)
    _sessions[model] = s
    return s


def disable(model) -> None:
    s = _sessions.pop(model, None)
    if s is not None:
        s.remove()


@contextlib.contextmanager
def enabled(model, budget=0, size=None, **kwargs):
    s = enable(model, budget, size, **kwargs)
    try:
        yield s
    finally:
        disable(model)


def get_session(model):
    return _sessions.get(model)


def stats(model=None):
    """The Stats of ``model`` (or of every model LMS is on for, added up); ``print()`` them."""
    from .session import Stats

    if model is not None:
        s = _sessions.get(model)
        return s.stats() if s is not None else Stats(plan="LMS is off for this model")
    total = None
    for s in list(_sessions.values()):
        total = s.stats() if total is None else total.merged(s.stats())
    return total if total is not None else Stats(plan="LMS is on for no model")


def _record():
    """The rank's record (core/stats.py) carries LMS's stats when LMS is on for a model."""
    if not _sessions:
        return None
    import dataclasses

    return dataclasses.asdict(stats())


_run_stats.section("lms", _record)


def __getattr__(name):
    if name in ("LmsError", "Stats"):
        from . import session as _s
        return getattr(_s, name)
    if name == "make_plan":
        from .planner import make_plan
        return make_plan
    raise AttributeError(f"module 'ddl_runtime.lms' has no attribute {name!r}")
