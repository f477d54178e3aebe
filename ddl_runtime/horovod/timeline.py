"""``hvd.start_timeline(path)`` / ``hvd.stop_timeline()`` (and ``HOROVOD_TIMELINE=path``).

The trace is the runtime's own Chrome trace (``ddl_runtime.timeline``: API calls, PACK,
ALLREDUCE with algorithm and bytes, UNPACK, WAIT, BCAST, ALLGATHER), so it opens in Perfetto
and chrome://tracing.  As in Horovod, ``path`` itself is written by rank 0; every other rank
writes its own events beside it (``trace.json`` -> ``trace.rank1.json``), which
``python -m ddl_runtime.timeline merge`` joins into one trace.

The runtime's timeline object is shared by everything that records into it (the engine, the
process-set controllers), so starting and stopping switch that one object between recording
and not, in place, rather than handing every holder a new one.  Neither call communicates;
``mark_cycles`` is accepted and marks nothing (there is no cycle).
"""
from __future__ import annotations

import os
import time
from typing import Optional

from .. import runtime as _rt
from ..errors import DDLInputError
from ..timeline import NullTimeline, Timeline, rank_path

_epoch: Optional[float] = None


def agree_epoch(rt) -> None:
    """Called inside hvd.init() on every rank: one time origin for all ranks' traces."""
    global _epoch
    _epoch = rt.control.bcast(time.time(), root=0)


def _runtime():
    rt = _rt.get()
    if rt is None:
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    return rt


def _switch(target, source) -> None:
    target.__class__ = source.__class__
    target.__dict__.clear()
    target.__dict__.update(source.__dict__)


def start_timeline(file_path: str, mark_cycles: bool = False) -> None:
    """Start recording into ``file_path`` (rank 0; other ranks beside it), ending any
    recording in progress.  Calling it again with the same path keeps recording."""
    if not isinstance(file_path, (str, os.PathLike)) or not os.fspath(file_path):
        raise DDLInputError(f"start_timeline: file_path must be a file name, got {file_path!r}")
    rt = _runtime()
    path = os.path.abspath(os.fspath(file_path))
    mine = path if rt.rank == 0 else rank_path(path, rt.rank)
    current = rt.timeline
    if current.enabled and getattr(current, "path", None) == mine:
        return
    epoch = _epoch if _epoch is not None else time.time()
    try:
        new = Timeline(mine, rt.rank, rt.size, epoch, exact_path=True)
    except OSError as exc:
        raise DDLInputError(f"start_timeline: cannot write {mine}: {exc.strerror}") from None
    current.close()
    _switch(current, new)


def stop_timeline() -> None:
    """Stop recording and close the file (a strict JSON array from then on)."""
    rt = _runtime()
    rt.timeline.close()
    _switch(rt.timeline, NullTimeline())
