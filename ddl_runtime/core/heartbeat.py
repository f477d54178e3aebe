"""A rank's heartbeat, for ddlrun's hang detection (``ddlrun --restarts``; ddlrun reads it in
wmlce_tools/runstats/liveness.py, which never imports this module: the file is the contract).

One small file per rank, ``<DDL_HEARTBEAT_DIR>/rank<N>.beat`` (JSON, replaced whole: temp file +
rename), written

* when a step ends (``RunStats.end_step``) and at least ``BEAT_S`` has passed since the last
  write, and at the first step: on the training path this costs a comparison and one store a
  step, the steps ended into ``rank<N>.steps`` (a shared mapping: exact when the rank dies
  between two beats);
* when a checkpoint save or load begins and ends (``phase("save")`` ... ``phase("step")``):
  they are counted apart, with their own limit;
* once a wait in a collective has lasted ``BEAT_S`` (the watchdog marks it), so ddlrun can tell
  a rank that waits for a peer from the peer that does not come.

It says how many steps this rank ended in this attempt, the step the attempt began at (the
checkpoint's step + 1, once one was loaded), the median of its last ``MEDIAN_STEPS`` steps, its
phase and since when, and ``limit_s``: how long it may go without ending a step (or leaving a
save or load) before it counts as hung: ``max(K x median step, floor)`` (``DDL_HANG_K``, default
20; ``DDL_HANG_FLOOR_S``, default 600 s, torch's own collective timeout), in a save or load
``max(K x the last one, DDL_HANG_IO_FLOOR_S)`` (default 1,800 s).  None during the warm-up (the
first ``WARMUP_STEPS`` steps: compilation, caches, the first data).

Where the rank is when it hangs: each write re-arms ``faulthandler.dump_traceback_later(limit)``,
a C thread that writes every thread's Python stack to ``rank<N>.stack`` when the rank has not
written again in time, even while a C call holds the GIL; ddlrun decides a little after
(``limit + BEAT_S``) and reads it.  An uncaught exception is written as ``rank<N>.error``
(type, message, where, traceback, global step) before the job aborts (state/faults.py).

Only the standard library: this is the bottom room.
"""
from __future__ import annotations

import faulthandler
import json
import mmap
import os
import socket
import statistics
import threading
import time
from typing import Callable, Optional

DIR_ENV = "DDL_HEARTBEAT_DIR"
BEAT_S = 1.0                 # at most one write a second on the training path
WARMUP_STEPS = 5
MEDIAN_STEPS = 64
DEFAULT_K = 20.0
DEFAULT_FLOOR_S = 600.0
DEFAULT_IO_FLOOR_S = 1800.0
FORMAT = 1

STEP, SAVE, LOAD, COLLECTIVE, ENDED = "step", "save", "load", "collective", "ended"


def beat_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{rank}.beat")


def stack_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{rank}.stack")


def steps_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{rank}.steps")


def error_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"rank{rank}.error")


def _replace(path: str, doc: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)


class Heartbeat:
    """One rank's heartbeat file and stack dump (see the module docstring).  ``due`` is the
    clock value (the step clock of RunStats) after which the next step's end writes."""

    def __init__(self, directory: str, rank: int, k: float = DEFAULT_K, floor_s: float = DEFAULT_FLOOR_S,
                 io_floor_s: float = DEFAULT_IO_FLOOR_S, clock: Callable[[], float] = time.perf_counter) -> None:
        self.directory, self.rank = directory, rank
        self.k, self.floor_s, self.io_floor_s = k, floor_s, io_floor_s
        self.clock = clock
        self.due = float("-inf")          # the first step's end writes
        self.phase_name = STEP
        self.phase_since = time.time()
        self.io_s: Optional[float] = None   # the last save's or load's duration
        self.first_at: Optional[float] = None   # wall time this attempt's first step ended
        self._io_started = 0.0
        self._lock = threading.Lock()
        self._stack = None
        self.path = beat_file(directory, rank)
        os.makedirs(directory, exist_ok=True)
        try:
            self._stack = open(stack_file(directory, rank), "w")
        except OSError:
            self._stack = None
        self.counter = self._counter(steps_file(directory, rank))

    def _counter(self, path: str):
        """rank<N>.steps: the attempt's step base and steps ended, two int64 (little-endian) in a
        shared mapping the rank stores into at every step (no system call): exact where the beat,
        written once a second, is late (ddlrun reads it when the attempt has ended)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, 16)
                self._map = mmap.mmap(fd, 16)
            finally:
                os.close(fd)
            return memoryview(self._map).cast("q")
        except (OSError, ValueError):
            self._map = None
            return [0, 0]       # the same stores, kept nowhere

    # -- what the rank's RunStats tells it ---------------------------------------------------
    def step(self, stats, now: float) -> None:
        """A step ended (``stats``: the rank's RunStats) and the beat is due."""
        self.due = now + BEAT_S
        self.phase_name = STEP
        if self.first_at is None:
            self.first_at = time.time()
        self.write(stats)

    def phase(self, name: str, stats) -> None:
        """Entering ``name`` (SAVE, LOAD, or back to STEP after one)."""
        now = time.time()
        if self.phase_name in (SAVE, LOAD) and name == STEP:
            self.io_s = now - self._io_started
        if name in (SAVE, LOAD):
            self._io_started = now
        self.phase_name, self.phase_since = name, now
        self.write(stats)

    def waiting(self, what: str, stats) -> None:
        """The watchdog: this rank has waited ``BEAT_S`` in collective ``what``."""
        if self.phase_name == STEP:
            self.phase_name, self.phase_since = COLLECTIVE, time.time()
            self.write(stats, what=what)

    def end(self, stats) -> None:
        """The rank finalizes: no more steps are coming, and none are late."""
        self.phase_name = ENDED
        faulthandler.cancel_dump_traceback_later()
        self.write(stats, arm=False)

    # -- the file ------------------------------------------------------------------------------
    def median_s(self, stats) -> Optional[float]:
        n = min(stats.steps, MEDIAN_STEPS)
        if n < 1:
            return None
        from .stats import RING

        last = [(stats.compute_at((stats.steps - 1 - i) % RING) + stats.comm_at((stats.steps - 1 - i) % RING))
                for i in range(n)]
        return statistics.median(last)

    def limit_s(self, stats, median: Optional[float]) -> Optional[float]:
        if self.phase_name in (SAVE, LOAD):
            return max(self.k * self.io_s, self.io_floor_s) if self.io_s else self.io_floor_s
        if self.phase_name == ENDED or stats.steps < WARMUP_STEPS or median is None:
            return None
        return max(self.k * median, self.floor_s)

    def write(self, stats, what: Optional[str] = None, arm: bool = True) -> None:
        self.counter[0], self.counter[1] = stats.step_base, stats.steps
        median = self.median_s(stats)
        limit = self.limit_s(stats, median)
        doc = {"format": FORMAT, "rank": self.rank, "steps": stats.steps, "step_base": stats.step_base,
               "median_s": median, "limit_s": limit, "phase": self.phase_name, "since": self.phase_since,
               "at": time.time(), "first_at": self.first_at, "pid": os.getpid(), "host": socket.gethostname()}
        if what:
            doc["collective"] = what
        with self._lock:
            try:
                _replace(self.path, doc)
            except OSError:
                return          # a full or vanished directory: the rank trains on, unwatched
            if arm and self._stack is not None and limit is not None:
                self._arm(limit)

    def _arm(self, limit: float) -> None:
        fd = self._stack.fileno()
        try:
            if os.fstat(fd).st_size:          # a dump from an earlier pause that was no hang
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
        except OSError:
            return
        faulthandler.dump_traceback_later(limit, repeat=False, file=self._stack, exit=False)

    def close(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        if self._map is not None:
            self.counter.release()
            self.counter = [0, 0]
            self._map.close()
            self._map = None
        if self._stack is not None:
            self._stack.close()
            self._stack = None


def write_error(directory: str, rank: int, kind: str, message: str, where: str, text: str,
                step: Optional[int]) -> None:
    """An uncaught exception on this rank, for ddlrun (the same one at the same step after a
    restart is a bug, not a fault: ddlrun does not restart it again)."""
    try:
        os.makedirs(directory, exist_ok=True)
        _replace(error_file(directory, rank), {"format": FORMAT, "rank": rank, "type": kind, "message": message,
                                               "where": where, "traceback": text, "step": step,
                                               "host": socket.gethostname(), "at": time.time()})
    except OSError:
        pass
