"""Which ranks of a running attempt are hung, which failed first and which nodes are lost:
ddlrun's decision under ``--restarts`` (``ddlrun/heal.py``), from the ranks' heartbeats
(``ddl_runtime/core/heartbeat.py`` writes ``<dir>/rank<N>.beat``; the file is the contract, this
module never imports the runtime) and their exit reports.  Plain data and numpy, linear in ranks:
10,000 ranks are decided in milliseconds (``benchmarks/heal_decision.py``, BENCHMARKS.md).

- **Stalled**: a rank whose progress (the steps it ended; a checkpoint save or load begun or
  ended) has not changed, as ddlrun saw it, for longer than the rank's own limit (its beat's
  ``limit_s``: max(K x its median step, a floor), a save's or load's apart; none during its
  warm-up) plus how late ddlrun can see a change (``BEAT_S`` + its scan interval).
- **Hung**: a stalled rank that is not waiting in a collective (its beat's phase); the ranks
  that wait in one are waiting for a hung one.  When every stalled rank waits (a collective no
  rank leaves), all of them are named.
- **Failed first**: the ranks whose exit reports (non-zero, not a stop for the walltime) came
  within ``FIRST_WINDOW_S`` of the first one, leaving out those ended by SIGTERM (ddlrun's or the
  launcher's own teardown after the first failure).
- **Lost**: after the launcher ended, the nodes none of whose ranks reported how it ended while
  ranks of other nodes did (a node that died takes its ranks' reports with it).
"""
from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

BEAT_FORMAT = 1              # ddl_runtime.core.heartbeat.FORMAT
BEAT_S = 1.0                 # ddl_runtime.core.heartbeat.BEAT_S: a change is written at most this late
FIRST_WINDOW_S = 1.0
TERMINATED = (128 + signal.SIGTERM, -signal.SIGTERM)
PHASES = ("step", "collective", "save", "load", "ended")
_CODE = {name: i for i, name in enumerate(PHASES)}
STEP, COLLECTIVE, SAVE, LOAD, ENDED = range(len(PHASES))


@dataclass(slots=True)
class Beat:
    """One rank's heartbeat as written."""
    rank: int
    steps: int                       # steps ended in this attempt
    step_base: int                   # the run's step the attempt began at (a checkpoint's + 1)
    median_s: Optional[float]
    limit_s: Optional[float]         # None: warm-up, or ended
    phase: str
    since: float                     # wall time the phase began
    at: float                        # wall time of the write
    host: str = "?"
    collective: Optional[str] = None
    first_at: Optional[float] = None  # wall time the attempt's first step ended on this rank

    @property
    def step(self) -> int:
        """The run's steps done: the attempt's base plus the steps it ended."""
        return self.step_base + self.steps


def parse_beat(text: str) -> Beat:
    d = json.loads(text)
    if d.get("format") != BEAT_FORMAT:
        raise ValueError(f"heartbeat format {d.get('format')!r}, this wml reads {BEAT_FORMAT}")
    return Beat(int(d["rank"]), int(d["steps"]), int(d.get("step_base") or 0), d.get("median_s"), d.get("limit_s"),
                str(d.get("phase", "step")), float(d.get("since", 0.0)), float(d.get("at", 0.0)),
                str(d.get("host", "?")), d.get("collective"), d.get("first_at"))


def read_beats(directory: Path, size: int) -> List[Optional[Beat]]:
    """Every rank's beat (None: none written yet, or unreadable right now: a rename in flight)."""
    out: List[Optional[Beat]] = [None] * size
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        if not (name.startswith("rank") and name.endswith(".beat")):
            continue
        try:
            beat = parse_beat((Path(directory) / name).read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if 0 <= beat.rank < size:
            out[beat.rank] = beat
    return out


def read_steps(directory: Path, size: int) -> Dict[int, int]:
    """rank -> the run's steps it had done (its ``rank<N>.steps``: the step base and the steps
    ended, two little-endian int64 the rank stores at every step), for the ranks that have one."""
    out: Dict[int, int] = {}
    for rank in range(size):
        try:
            data = (Path(directory) / f"rank{rank}.steps").read_bytes()
        except OSError:
            continue
        if len(data) >= 16:
            base, steps = np.frombuffer(data[:16], dtype="<i8")
            out[rank] = int(base + steps)
    return out


@dataclass
class Stall:
    hung: np.ndarray                 # ranks, ascending
    waiting: np.ndarray              # ranks waiting in a collective (for the hung ones)
    stalled_s: np.ndarray            # per hung rank: how long ddlrun saw no progress


class Watch:
    """ddlrun's view of one attempt's ranks over time, in arrays indexed by rank: each rank's
    progress and when ddlrun (its monotonic clock: no clock of another node is compared) saw it
    change."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.steps = np.full(size, -1, dtype=np.int64)
        self.io = np.zeros(size, dtype=np.int8)          # SAVE or LOAD while in one, else STEP
        self.phase = np.zeros(size, dtype=np.int8)
        self.limit = np.full(size, np.nan)
        self.changed = np.full(size, np.nan)             # when the progress last changed (ddlrun's clock)
        self.reached = np.zeros(size, dtype=np.int64)    # the run's step: base + steps
        self.first_step_at: Optional[float] = None       # wall time of the attempt's first step ended (any rank)

    def update(self, beats: Sequence[Optional[Beat]], now: float) -> None:
        have = [b for b in beats if b is not None]
        if not have:
            return
        ranks = np.fromiter((b.rank for b in have), dtype=np.int64, count=len(have))
        steps = np.fromiter((b.steps for b in have), dtype=np.int64, count=len(have))
        phase = np.fromiter((_CODE.get(b.phase, STEP) for b in have), dtype=np.int8, count=len(have))
        limit = np.fromiter((np.nan if b.limit_s is None else b.limit_s for b in have), dtype=np.float64,
                            count=len(have))
        base = np.fromiter((b.step_base for b in have), dtype=np.int64, count=len(have))
        self.update_arrays(ranks, steps, phase, limit, base, now)
        firsts = [b.first_at for b in have if b.first_at is not None]
        if firsts:
            first = min(firsts)
            self.first_step_at = first if self.first_step_at is None else min(first, self.first_step_at)

    def update_arrays(self, ranks: np.ndarray, steps: np.ndarray, phase: np.ndarray, limit: np.ndarray,
                      base: np.ndarray, now: float) -> None:
        io = np.where((phase == SAVE) | (phase == LOAD), phase, STEP).astype(np.int8)
        moved = (self.steps[ranks] != steps) | (self.io[ranks] != io)
        self.changed[ranks[moved]] = now
        self.steps[ranks] = steps
        self.io[ranks] = io
        self.phase[ranks] = phase
        self.limit[ranks] = limit
        self.reached[ranks] = base + steps

    def stalled(self, now: float, slack_s: float) -> Stall:
        """The hung ranks (and the ones waiting for them) at ``now``; ``slack_s``: how late ddlrun
        can see a change (BEAT_S + its scan interval)."""
        with np.errstate(invalid="ignore"):
            late = (now - self.changed) > (self.limit + slack_s)      # NaN (no limit, no beat): never
        late &= self.phase != ENDED
        in_collective = self.phase == COLLECTIVE
        hung = late & ~in_collective
        waiting = in_collective         # late or not yet: each waits for a peer, not for itself
        if not hung.any():
            hung, waiting = late & in_collective, np.zeros_like(late)
        ranks = np.flatnonzero(hung)
        return Stall(ranks, np.flatnonzero(waiting), now - self.changed[ranks])


@dataclass(frozen=True)
class Report:
    """A rank's exit report as ddlrun received it (``t``: ddlrun's monotonic clock)."""
    rank: int
    code: int
    t: float


def failed_first(reports: Sequence[Report], resume_code: int = 75,
                 window_s: float = FIRST_WINDOW_S) -> List[Report]:
    """The reports of the ranks that failed first (see the module docstring), in arrival order."""
    bad = [r for r in reports if r.code not in (0, resume_code)]
    if not bad:
        return []
    t0 = bad[0].t
    first = [r for r in bad if r.t - t0 <= window_s and r.code not in TERMINATED]
    return first or bad[:1]


def lost_nodes(size: int, ranks_per_node: int, reported: Sequence[int]) -> List[int]:
    """Nodes none of whose ranks reported, when ranks of another node did (layout node indices)."""
    nodes = size // ranks_per_node
    seen = np.zeros(size, dtype=bool)
    if len(reported):
        seen[np.asarray(list(reported), dtype=np.int64)] = True
    per_node = seen.reshape(nodes, ranks_per_node).any(axis=1)
    if not per_node.any():
        return []
    return [int(n) for n in np.flatnonzero(~per_node)]


def signal_name(code: int) -> Optional[str]:
    """SIGKILL for 137 (a shell's 128 + N) or -9; None for a plain exit status."""
    num = code - 128 if code > 128 else -code if code < 0 else None
    if num is None:
        return None
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def nodes_of(ranks: Sequence[int], ranks_per_node: int) -> Dict[int, List[int]]:
    """layout node -> its ranks among ``ranks``."""
    out: Dict[int, List[int]] = {}
    for r in ranks:
        out.setdefault(int(r) // ranks_per_node, []).append(int(r))
    return out


def step_reached(beats: Sequence[Optional[Beat]]) -> Optional[int]:
    """The run's steps done by the furthest rank (None: no beat)."""
    steps = [b.step for b in beats if b is not None]
    return max(steps) if steps else None
