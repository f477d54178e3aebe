"""What each rank did, kept cheaply and written as one JSON file per rank (`wml report` reads them).

Per step (a DistributedOptimizer.step(), a Keras batch, a custom loop's gradient reduction) a rank
keeps the step's time, the part of it spent in collectives, the part of that spent waiting for
the last rank to arrive, and the bytes it reduced; the totals over the run, and the last `RING`
steps one by one (float32, for the report).

Every wait is counted where it happens: each collective of the runtime (its calls, a handle's
wait() and done(), a flat bucket's start(), Horovod's negotiated requests, the GPU transports'
handles) is wrapped by `collective`, which adds the time spent inside it (the outermost call
only) to the step's communication; a rank's compute is the rest of the step, its own work.
The wait for the last rank is measured from the ranks' arrival times: each agreement of the
runtime (the signature's MAX reduction on the MPI path, the shared-memory barrier on one host),
which every collective already makes, carries one int64 more, this rank's `arrival()`: the own
work (time outside collectives) it did since the previous agreement ended.  The ranks leave an
agreement together, so that end is a time every rank shares, and the largest arrival is the last
rank's: `arrived()` adds (last - mine) to the step's wait.  No round is added and no clock has
to agree across hosts.  A step in which no agreement carried an arrival (Horovod's negotiated
requests only) keeps NaN for its wait, and `wml report` infers that step's wait from the times.

The file, `<dir>/rank<N>.json`, is replaced whole (temp file + rename) at finalize, at a stop
for the walltime, and every `DDL_STATS_INTERVAL_S` seconds at a step boundary (so a job killed
before finalize leaves its last state).  `<dir>` is `DDL_STATS_DIR`, else `$WML_JOB_DIR/stats`
(core/jobenv.py); neither set: nothing is written.

Rooms above add sections (LMS: `section("lms", fn)`) without this room importing them; the
checkpoint room sets `run_step`, `resumed_from` and `checkpoint_step` (the run's own step
numbers across a chain's segments).

Keras and TensorFlow compile their training step, so Python placed in the step runs once, while
it is traced.  Two things there run every step: a Keras callback's batch hook, and the body of a
gradient reduction (a `tf.numpy_function`, or plain Python eagerly and on Keras' torch backend).
A reduction built inside `gradient_reduction()` reports its bytes to `reduced()`, which ends the
step (a custom loop, `DistributedGradientTape`); a callback that `claim_steps()` ends the steps
itself at each batch's end, and `passed()` says that the next batch trained nothing (a resumed
epoch passing over batches already trained) and is no step.
"""
from __future__ import annotations

import base64
import functools
import json
import os
import socket
import sys
import threading
import time
from array import array
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Optional

RING = 1024              # steps kept one by one (4 bytes each, three times)
FORMAT = 2               # the file's "format": what `wml report` expects (1: before the measured wait)
FILE_PREFIX = "rank"
ARGV_CHARS = 4096        # at most this much of the program's arguments in the record
NOT_MEASURED = float("nan")   # a step's wait when no agreement carried an arrival in it

SECTIONS: Dict[str, Callable[[], Optional[dict]]] = {}   # name -> () -> dict (or None: nothing to say)

# The running rank's record (the runtime sets it at init, clears it at finalize): `collective`
# counts into it.  None: nothing is counted (before init, after finalize, a benchmark's "old").
CURRENT: Optional["RunStats"] = None


def section(name: str, provider: Callable[[], Optional[dict]]) -> None:
    """A room above the runtime adds `name` to every rank's record (called when the record is written)."""
    SECTIONS[name] = provider


def collective(fn: Callable) -> Callable:
    """`fn` is (part of) a collective: the time a call spends in it is communication in this rank's
    record (a call inside another counts once, with it).  Two clock reads a call.  A flag, not a
    depth: a second thread's collective that overlaps one already counted adds nothing (the time
    is counted once), and no interleaving can leave the count stuck."""
    @functools.wraps(fn)
    def counted(*args, **kwargs):
        st = CURRENT
        if st is None or st._inside:
            return fn(*args, **kwargs)
        st._inside = True
        st._entered = entered = st.clock()
        try:
            return fn(*args, **kwargs)
        finally:
            st._inside = False
            spent = st.clock() - entered
            st._comm += spent
            st._comm_run += spent
    return counted


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


def _argv() -> List[str]:
    """The program and its arguments as this rank was started (shortened to ARGV_CHARS)."""
    out, left = [], ARGV_CHARS
    for a in sys.argv:
        if left <= 0:
            out.append("...")
            break
        out.append(a if len(a) <= left else a[:left] + "...")
        left -= len(a)
    return out


class RunStats:
    """One rank's counters.  `end_step()` is the only call on the training path; the collectives
    count their time through `collective` and their arrivals through `arrival()`/`arrived()`."""

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
        self.wait_s = 0.0
        self.min_step_s = float("inf")
        self.max_step_s = 0.0
        self.bytes_reduced = 0
        self.arrivals = 0                          # agreements that carried this rank's arrival
        self.waited_steps = 0                      # timed steps in which one did (wait_s is theirs)
        self.run_step: Optional[int] = None        # the run's step the checkpoint layer last passed
        self.resumed_from: Optional[int] = None    # the checkpoint's step this run resumed after
        self.checkpoint_step: Optional[int] = None  # the last step this run saved
        self._compute = array("f", bytes(4 * RING))
        self._comm_ring = array("f", bytes(4 * RING))
        self._wait_ring = array("f", bytes(4 * RING))
        self._origin = clock()                     # the first step counts from here (init)
        self._last_end = self._origin
        self._last_write = self._origin
        self.status = "running"
        self._inside = False                       # in a collective now (`collective`)
        self._entered = 0.0                        # since then
        self._comm = 0.0                           # in collectives since the last step's end
        self._comm_run = 0.0                       # ... since the start (own work = clock - this)
        self._wait = 0.0                           # waited for the last rank since the last step's end
        self._arrived = False                      # an agreement carried this rank's arrival since then
        self._own_ref = self._origin               # own-work clock when the last agreement ended
        self._own_now = self._origin
        self._pending_bytes = 0                    # reductions since the last step's end (reduced())
        self._step_owner: Optional[object] = None  # a callback that ends the steps (claim_steps)
        self._passing = False                      # the next step's end is a batch passed over (passed())
        self.step_base = 0                         # the run's step this attempt began at (a checkpoint's + 1)
        self.beat = None                           # core/heartbeat.py's Heartbeat, under ddlrun --restarts

    # -- the collectives ----------------------------------------------------------------------
    def arrival(self) -> int:
        """What this rank carries into an agreement: its own work (ns) since the previous one ended,
        up to where it entered the collective it is in."""
        at = self._entered if self._inside else self.clock()
        own = self._own_now = at - self._comm_run
        return int((own - self._own_ref) * 1e9)

    def arrived(self, mine: int, last: int) -> None:
        """The agreement ended; `last` is the largest arrival of any rank: this rank waited
        (last - mine) for the last one to arrive."""
        if last > mine:
            self._wait += (last - mine) * 1e-9
        self._own_ref = self._own_now
        self.arrivals += 1
        self._arrived = True

    # -- the training path ------------------------------------------------------------------
    def end_step(self, nbytes: int = 0) -> None:
        """A step ended now, its collectives having reduced `nbytes`."""
        if self._pending_bytes:
            nbytes += self._pending_bytes
            self._pending_bytes = 0
        now = self.clock()
        step = now - self._last_end
        self._last_end = now
        comm, wait, measured = self._comm, self._wait, self._arrived
        self._comm = self._wait = 0.0
        self._arrived = False
        if self._passing:                          # a batch passed over: no step
            self._passing = False
            return
        if comm > step:                            # a collective entered before the last step's end
            comm = step
        if wait > comm:                            # measured in an agreement, blocked partly before it
            wait = comm
        i = self.steps % RING
        self._compute[i] = step - comm
        self._comm_ring[i] = comm
        self._wait_ring[i] = wait if measured else NOT_MEASURED
        self.steps += 1
        self.bytes_reduced += nbytes
        if self.steps == 1:
            self.first_step_s = step
        else:
            self.step_s += step
            self.comm_s += comm
            if measured:
                self.wait_s += wait
                self.waited_steps += 1
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

    def reduced(self, nbytes: int) -> None:
        """A step's gradient reduction reduced `nbytes`: the step ends here, unless a callback ends
        the steps (then they go into its step)."""
        self._pending_bytes += nbytes
        if self._step_owner is None:
            self.end_step()

    def passed(self) -> None:
        """The step that ends next trained nothing (a resumed epoch passing over the batches
        already trained): its end only moves the next step's start."""
        self._passing = True

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
        return self._comm_ring[i]

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
            "argv": _argv(), **self.placement,
            "steps": self.steps, "step_base": self.step_base, "first_step_s": self.first_step_s,
            "step_s": self.step_s, "comm_s": self.comm_s, "wait_s": self.wait_s, "timed_steps": timed,
            "min_step_s": self.min_step_s if timed else None, "max_step_s": self.max_step_s if timed else None,
            "bytes_reduced": self.bytes_reduced, "arrivals": self.arrivals, "waited_steps": self.waited_steps,
            "run_step": self.run_step, "resumed_from": self.resumed_from, "checkpoint_step": self.checkpoint_step,
            # the last steps one by one (float32 little-endian, base64): compute = step - comm, wait <= comm
            # (NaN: no agreement carried an arrival in that step, its wait is not measured)
            "ring_first_step": self.steps - min(self.steps, RING),
            "ring_compute_s": self._ring(self._compute), "ring_comm_s": self._ring(self._comm_ring),
            "ring_wait_s": self._ring(self._wait_ring),
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
