"""What each rank did, kept cheaply and written as one JSON file per rank (`wml report` reads them).

Per step (a DistributedOptimizer.step(), or `record_step()` for another loop) a rank keeps the
step's time and the part of it spent in the step's collectives (waiting for the gradient
reductions: the transfer the backward pass did not hide, and the wait for the last rank to
arrive), and the bytes it reduced; the totals over the run, and the last `RING` steps one by
one (float32, for the report: a step's slowest rank, the others' wait for it).  Nothing is
traced and nothing is communicated: a step costs two clock reads and a few additions.

The file, `<dir>/rank<N>.json`, is replaced whole (temp file + rename) at finalize, at a stop
for the walltime, and every `DDL_STATS_INTERVAL_S` seconds at a step boundary (so a job killed
before finalize leaves its last state).  `<dir>` is `DDL_STATS_DIR`, else `$WML_JOB_DIR/stats`
(core/jobenv.py); neither set: nothing is written.

Rooms above add sections (LMS: `section("lms", fn)`) without this room importing them.

Keras and TensorFlow compile their training step, so Python placed in the step runs once, while
it is traced.  Two things there run every step: a Keras callback's batch hook, and the body of a
gradient reduction (a `tf.numpy_function`, or plain Python eagerly and on Keras' torch backend).
A reduction built inside `gradient_reduction()` reports its time and bytes to `reduced()`, which
ends the step (a custom loop, `DistributedGradientTape`); a callback that `claim_steps()` ends
the steps itself at each batch's end and the reductions' time and bytes go into its steps.
"""
from __future__ import annotations

import base64
import json
import os
import socket
import threading
import time
from array import array
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Optional

RING = 1024              # steps kept one by one (4 bytes each, twice)
FORMAT = 1               # the file's "format": what `wml report` expects
FILE_PREFIX = "rank"

SECTIONS: Dict[str, Callable[[], Optional[dict]]] = {}   # name -> () -> dict (or None: nothing to say)


def section(name: str, provider: Callable[[], Optional[dict]]) -> None:
    """A room above the runtime adds `name` to every rank's record (called when the record is written)."""
    SECTIONS[name] = provider


_building = threading.local()


@contextmanager
def gradient_reduction() -> Iterator[None]:
    """Reductions built (or run eagerly) in this block are a training step's gradient reduction."""
    before = getattr(_building, "on", False)
    _building.on = True
    try:
        yield
    finally:
        _building.on = before


def building_gradient_reduction() -> bool:
    return getattr(_building, "on", False)


def rank_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"{FILE_PREFIX}{rank}.json")


def cpu_list(cpus) -> str:
    """0-3,8,10-11: a rank's cores as `taskset -c` spells them."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


class RunStats:
    """One rank's counters.  `end_step()` is the only call on the training path."""

    def __init__(self, rank: int, size: int, directory: Optional[str] = None, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.rank, self.size = rank, size
        self.directory = directory
        self.interval_s = interval_s
        self.clock = clock
        self.placement: dict = {}                 # node, local rank, GPU, cores (the runtime fills it)
        self.extra: Optional[Callable[[], dict]] = None   # more fields at each write (the GPU memory peak)
        self.started = time.time()
        self.steps = 0
        self.first_step_s: Optional[float] = None  # the first step (warm-up) is kept apart
        self.step_s = 0.0                          # steps 2..n
        self.comm_s = 0.0
        self.min_step_s = float("inf")
        self.max_step_s = 0.0
        self.bytes_reduced = 0
        self._compute = array("f", bytes(4 * RING))
        self._comm = array("f", bytes(4 * RING))
        self._origin = clock()                     # the first step counts from here (init)
        self._last_end = self._origin
        self._last_write = self._origin
        self.status = "running"
        self._pending_comm_s = 0.0                 # reductions since the last step's end (reduced())
        self._pending_bytes = 0
        self._step_owner: Optional[object] = None  # a callback that ends the steps (claim_steps)
        self.step_base = 0                         # the run's step this attempt began at (a checkpoint's + 1)
        self.beat = None                           # core/heartbeat.py's Heartbeat, under ddlrun --restarts

    # -- the training path ------------------------------------------------------------------
    def end_step(self, comm_s: float = 0.0, nbytes: int = 0) -> None:
        """A step ended now; `comm_s` of it went to its collectives, which reduced `nbytes`."""
        if self._pending_bytes or self._pending_comm_s:
            comm_s += self._pending_comm_s
            nbytes += self._pending_bytes
            self._pending_comm_s, self._pending_bytes = 0.0, 0
        now = self.clock()
        step = now - self._last_end
        self._last_end = now
        i = self.steps % RING
        self._compute[i] = step - comm_s if step > comm_s else 0.0
        self._comm[i] = comm_s
        self.steps += 1
        self.bytes_reduced += nbytes
        if self.steps == 1:
            self.first_step_s = step
        else:
            self.step_s += step
            self.comm_s += comm_s
            if step < self.min_step_s:
                self.min_step_s = step
            if step > self.max_step_s:
                self.max_step_s = step
        beat = self.beat
        if beat is not None:
            beat.counter[1] = self.steps
            if now >= beat.due:
                beat.step(self, now)
        if self.directory is not None and now - self._last_write >= self.interval_s:
            self.write("running")

    def reduced(self, comm_s: float, nbytes: int) -> None:
        """A step's gradient reduction took `comm_s` and reduced `nbytes`: the step ends here,
        unless a callback ends the steps (then they go into its step)."""
        self._pending_comm_s += comm_s
        self._pending_bytes += nbytes
        if self._step_owner is None:
            self.end_step()

    def claim_steps(self, owner: object) -> None:
        """`owner` (a callback) ends the steps from now on (the last to claim: two in one fit count once)."""
        self._step_owner = owner

    def release_steps(self, owner: object) -> None:
        if self._step_owner is owner:
            self._step_owner = None

    def ends_steps(self, owner: object) -> bool:
        return self._step_owner is owner

    def compute_at(self, i: int) -> float:
        """Slot ``i`` of the ring of the last steps' compute times."""
        return self._compute[i]

    def comm_at(self, i: int) -> float:
        return self._comm[i]

    # -- the record ---------------------------------------------------------------------------
    def _ring(self, values: array) -> str:
        n = min(self.steps, RING)
        start = self.steps - n
        ordered = array("f", (values[(start + k) % RING] for k in range(n)))
        return base64.b64encode(ordered.tobytes()).decode("ascii")

    def as_dict(self, status: Optional[str] = None, extra: Optional[dict] = None) -> dict:
        timed = max(self.steps - 1, 0)
        out = {
            "format": FORMAT, "rank": self.rank, "size": self.size, "status": status or self.status,
            "host": socket.gethostname(), "pid": os.getpid(), "started": self.started, "written": time.time(),
            **self.placement,
            "steps": self.steps, "step_base": self.step_base, "first_step_s": self.first_step_s,
            "step_s": self.step_s, "comm_s": self.comm_s, "timed_steps": timed,
            "min_step_s": self.min_step_s if timed else None, "max_step_s": self.max_step_s if timed else None,
            "bytes_reduced": self.bytes_reduced,
            # the last steps one by one (float32 little-endian, base64): compute = step - comm
            "ring_first_step": self.steps - min(self.steps, RING),
            "ring_compute_s": self._ring(self._compute), "ring_comm_s": self._ring(self._comm),
        }
        if self.extra is not None:
            try:
                out.update(self.extra())
            except Exception:  # noqa: BLE001 - a record without them beats none
                pass
        if extra:
            out.update(extra)
        for name, provider in list(SECTIONS.items()):
            try:
                value = provider()
            except Exception as exc:  # noqa: BLE001 - a record without the section beats none
                value = {"error": f"{type(exc).__name__}: {exc}"}
            if value is not None:
                out[name] = value
        return out

    def write(self, status: Optional[str] = None, extra: Optional[dict] = None) -> Optional[str]:
        """Replace this rank's file; returns its path (None: no directory, or it cannot be written)."""
        if status is not None:
            self.status = status
        self._last_write = self.clock()
        if self.directory is None:
            return None
        path = rank_file(self.directory, self.rank)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.as_dict(extra=extra), f, separators=(",", ":"))
            os.replace(tmp, path)
        except OSError as exc:
            from .log import log

            log(f"cannot write the run statistics to {path}: {exc.strerror or exc}")
            self.directory = None       # said once; the job goes on
            return None
        return path
