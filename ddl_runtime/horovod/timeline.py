"""``hvd.start_timeline(path)`` / ``hvd.stop_timeline()`` (and ``HOROVOD_TIMELINE=path``).

The trace is laid out as Horovod's (horovod/common/timeline.cc), so chrome://tracing, Perfetto
and scripts written for Horovod's timelines read it: every tensor is a row ("process") named
``<op>.<name>`` (``allreduce.grad.0``, ``broadcast.noname.3``) holding, per collective,
``NEGOTIATE_<OP>`` (from this rank's submission until every rank of the set had submitted,
with an instant event named after this rank), then ``<OP>`` (``ALLREDUCE``...) around its
activities (``MPI_ALLREDUCE``, ``SHM_ALLREDUCE``, ``MPI_BROADCAST``...), ended with the
tensor's dtype and shape; ``CYCLE_START`` instant marks (``HOROVOD_TIMELINE_MARK_CYCLES=1`` or
``start_timeline(path, mark_cycles=True)``) open each negotiation round.  Row 0 keeps the
runtime's own detail (``ddl_runtime.timeline``: API calls, PACK, ALLREDUCE with algorithm and
bytes, UNPACK, WAIT), its process_name args also giving Horovod's
``start_time_since_epoch_in_micros``.  As in Horovod, ``path`` itself is written by rank 0;
every other rank writes its own events beside it (``trace.json`` -> ``trace.rank1.json``;
Horovod writes rank 0's only).

The runtime's timeline object is shared by everything that records into it (the engine, the
process-set controllers), so starting and stopping switch that one object between recording
and not, in place, rather than handing every holder a new one.  Neither call communicates;
a cycle is one negotiation round of a process set.
"""
from __future__ import annotations

import os
import time
from typing import Dict, Optional

from ..state import runtime as _rt
from ..errors import DDLInputError
from ..timeline import NullTimeline, Timeline, rank_path

_epoch: Optional[float] = None


class HorovodTimeline(Timeline):
    """ddl_runtime's Chrome trace in Horovod's per-tensor layout (see the module's text)."""

    def __init__(self, path: str, rank: int, size: int, epoch_wall: float, mark_cycles: bool = False):
        self.rank = rank
        self.mark_cycles = bool(mark_cycles)
        self._rows: Dict[str, int] = {}     # "<op>.<name>" -> its pid (1, 2, ...)
        self._open: Dict[str, bool] = {}    # rows inside their top-level <OP> event
        super().__init__(path, rank, size, epoch_wall, exact_path=True)

    def _pid(self, rank: int) -> int:
        return 0  # the runtime's own lanes; tensors are 1, 2, ... as in Horovod

    def _process_args(self, rank: int, epoch_wall: float) -> dict:
        return {"name": f"rank {rank}", "start_time_since_epoch_in_micros": int(epoch_wall * 1e6)}

    def _row(self, row: str) -> int:
        pid = self._rows.get(row)
        if pid is None:
            pid = self._rows[row] = len(self._rows) + 1
            self._write({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": row}})
            self._write({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
        return pid

    def _event(self, row: str, ph: str, t: float, name: str = "", args: Optional[dict] = None) -> None:
        event = {"ph": ph, "ts": self._ts(t), "pid": self._row(row)}
        if ph != "E":
            event["name"] = name
        if ph == "X":
            event["dur"] = 0
        if args:
            event["args"] = args
        self._write(event)

    def cycle_start(self) -> None:
        if self.mark_cycles:
            self._write({"ph": "i", "name": "CYCLE_START", "ts": self._ts(time.perf_counter()), "s": "g"})

    def tensors_negotiated(self, kind: str, tensors: list, t0: float, t1: float) -> None:
        for name in dict.fromkeys(t[0] for t in tensors):
            row = f"{kind}.{name}"
            if self._open.pop(row, False):  # a collective that never completed here (failed)
                self._event(row, "E", t0)
            self._event(row, "B", t0, f"NEGOTIATE_{kind.upper()}")
            self._event(row, "X", t0, str(self.rank))
            self._event(row, "E", t1)
            self._event(row, "B", t1, kind.upper())
            self._open[row] = True

    def tensors_activity(self, kind: str, names: list, activity: str, t0: float, t1: float) -> None:
        for name in dict.fromkeys(names):
            row = f"{kind}.{name}"
            if self._open.get(row):
                self._event(row, "B", t0, activity)
                self._event(row, "E", t1)

    def tensors_reduced(self, tensors: list, activity: str, t0: float, t1: float) -> None:
        """The ordered engine's allreduces (torch DistributedOptimizer's buckets): no negotiation,
        so the row holds ALLREDUCE around the activity, ended with dtype and shape."""
        for name, dtype, shape in tensors:
            row = f"allreduce.{name}"
            self._event(row, "B", t0, "ALLREDUCE")
            self._event(row, "B", t0, activity)
            self._event(row, "E", t1)
            self._event(row, "E", t1, args=_tensor_args(dtype, shape))

    def tensors_done(self, kind: str, tensors: list) -> None:
        now = time.perf_counter()
        for name, dtype, shape in tensors:
            row = f"{kind}.{name}"
            if self._open.pop(row, False):
                self._event(row, "E", now, args=_tensor_args(dtype, shape))
        self.flush()


def _tensor_args(dtype, shape) -> dict:
    """Horovod's end-of-tensor args: ``{"dtype": "HOROVOD_FLOAT32", "shape": "[2, 3]"}``."""
    return {"dtype": f"HOROVOD_{str(dtype).upper()}", "shape": "[" + ", ".join(str(int(d)) for d in shape) + "]"}


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
    recording in progress.  Calling it again with the same path keeps recording.
    ``mark_cycles``: a CYCLE_START mark at each negotiation round."""
    if not isinstance(file_path, (str, os.PathLike)) or not os.fspath(file_path):
        raise DDLInputError(f"start_timeline: file_path must be a file name, got {file_path!r}")
    rt = _runtime()
    path = os.path.abspath(os.fspath(file_path))
    mine = path if rt.rank == 0 else rank_path(path, rt.rank)
    current = rt.timeline
    if current.enabled and getattr(current, "path", None) == mine:
        current.mark_cycles = bool(mark_cycles)
        return
    epoch = _epoch if _epoch is not None else time.time()
    try:
        new = HorovodTimeline(mine, rt.rank, rt.size, epoch, mark_cycles)
    except OSError as exc:
        raise DDLInputError(f"start_timeline: cannot write {mine}: {exc.strerror}") from None
    current.close()
    _switch(current, new)


def stop_timeline() -> None:
    """Stop recording and close the file (a strict JSON array from then on)."""
    rt = _runtime()
    rt.timeline.close()
    _switch(rt.timeline, NullTimeline())
