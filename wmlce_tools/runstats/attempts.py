"""A run's attempts under ``ddlrun --restarts``: the nodes each one ran on, how it ended, what
failed (rank, node, and a signal, a hang with the rank's Python stack, a lost node, or an
exception with its traceback), the time lost (from the fault to the first step after the
restart) and the steps redone.  ddlrun (``ddlrun/heal.py``) writes it as ``attempts.json`` in
the job directory after every attempt; its end line, ``wml status`` and ``wml report`` read it.

Plain dataclasses and JSON (``FORMAT``); only the standard library.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

FILE = "attempts.json"
FORMAT = 1
KINDS = ("signal", "hang", "lost", "exception", "exit")


@dataclass
class Fault:
    """What failed in one rank (or, ``rank`` None, the launch as a whole)."""
    rank: Optional[int]
    node: Optional[str]
    kind: str                          # one of KINDS
    signal: Optional[str] = None       # SIGKILL, ... (kind "signal")
    code: Optional[int] = None         # the rank's exit status as ddlrun got it
    step: Optional[int] = None         # the run's step it failed at (steps done before it)
    stack: Optional[str] = None        # a hung rank's Python stack (faulthandler)
    exception: Optional[str] = None    # "ValueError: bad batch (train.py:41 in step)"
    traceback: Optional[str] = None
    stalled_s: Optional[float] = None  # a hung rank: how long it ended no step
    limit_s: Optional[float] = None    # ... and its limit

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "the launch"
        where = f" on {self.node}" if self.node else ""
        if self.kind == "signal":
            what = f"killed by {self.signal}"
        elif self.kind == "hang":
            what = "hung" + (f" (no step for {self.stalled_s:.0f} s, its limit {self.limit_s:.0f} s)"
                             if self.stalled_s is not None and self.limit_s is not None else "")
        elif self.kind == "lost":
            what = "lost with its node"
        elif self.kind == "exception":
            what = f"raised {self.exception}"
        else:
            what = f"exited with status {self.code}"
        at = f" at step {self.step}" if self.step is not None else ""
        return f"{who}{where} {what}{at}"


@dataclass
class Attempt:
    index: int                         # 1-based
    nodes: List[str]                   # the layout's nodes, in order
    started: float                     # wall time
    ended: Optional[float] = None
    status: Optional[int] = None       # ddlrun's status for it
    outcome: str = "running"           # running | finished | stopped (for the walltime) | failed
    faults: List[Fault] = field(default_factory=list)
    fault_at: Optional[float] = None   # wall time of the fault
    restored_step: Optional[int] = None   # the checkpoint's step it resumed from (None: the start)
    first_step_at: Optional[float] = None  # wall time its first step ended
    reached_step: Optional[int] = None     # the run's steps done when it ended
    left_out: List[str] = field(default_factory=list)   # nodes that failed in it, left out after it
    note: str = ""                     # why it was not restarted, or what the next job should do


@dataclass
class Attempts:
    restarts: int                      # allowed
    spare_nodes: int
    attempts: List[Attempt] = field(default_factory=list)
    exclude_next: List[str] = field(default_factory=list)   # failed nodes no spare replaced: the next job leaves them out
    checkpoint_dir: Optional[str] = None

    def time_lost_s(self, i: int) -> Optional[float]:
        """Attempt ``i`` (0-based) failed: from its fault to the next attempt's first step."""
        if i + 1 >= len(self.attempts):
            return None
        a, b = self.attempts[i], self.attempts[i + 1]
        if a.fault_at is None or b.first_step_at is None:
            return None
        return max(0.0, b.first_step_at - a.fault_at)

    def steps_redone(self, i: int) -> Optional[int]:
        """Steps attempt ``i`` had done that the next one did again (from its checkpoint on)."""
        if i + 1 >= len(self.attempts):
            return None
        a, b = self.attempts[i], self.attempts[i + 1]
        if a.reached_step is None:
            return None
        start = 0 if b.restored_step is None else b.restored_step + 1
        return max(0, a.reached_step - start)

    @property
    def restarted(self) -> int:
        return max(0, len(self.attempts) - 1)

    def one_line(self) -> str:
        """``2 attempts: 1 failed at step 12 (rank 2 on node1 killed by SIGKILL), restarted on node0,node2
        from step 9: 6.2 s lost, 2 steps redone; 2 finished``."""
        parts = []
        for i, a in enumerate(self.attempts):
            if a.outcome in ("failed",):
                what = "; ".join(f.describe() for f in a.faults[:3]) or f"status {a.status}"
                if len(a.faults) > 3:
                    what += f"; {len(a.faults) - 3} more"
                text = f"{a.index} failed ({what})"
                if i + 1 < len(self.attempts):
                    nxt = self.attempts[i + 1]
                    frm = "the start" if nxt.restored_step is None else f"the checkpoint of step {nxt.restored_step}"
                    lost, redone = self.time_lost_s(i), self.steps_redone(i)
                    text += (f", restarted on {','.join(nxt.nodes)} from {frm}"
                             + (f": {lost:.1f} s lost" if lost is not None else "")
                             + (f", {redone} step{'s' if redone != 1 else ''} redone" if redone is not None else ""))
                elif a.note:
                    text += f"; {a.note}"
                parts.append(text)
            else:
                parts.append(f"{a.index} {a.outcome}")
        n = len(self.attempts)
        return f"{n} attempt{'s' if n != 1 else ''}: " + "; ".join(parts)

    def details(self) -> List[str]:
        """A line per fault, with its stack or traceback beneath (ddlrun's end, wml report)."""
        out = []
        for a in self.attempts:
            for f in a.faults:
                out.append(f"attempt {a.index} ({','.join(a.nodes)}): {f.describe()}")
                body = f.traceback if f.kind == "exception" else f.stack
                if body:
                    out += ["    " + line for line in body.rstrip("\n").splitlines()]
        return out


def save(directory: Path, rec: Attempts) -> Path:
    """Write ``directory/attempts.json`` atomically."""
    path = Path(directory) / FILE
    tmp = path.with_name(f".{FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": FORMAT, **dataclasses.asdict(rec)}, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def load(directory: Path) -> Optional[Attempts]:
    """The attempts recorded in ``directory`` (None: none, or unreadable)."""
    try:
        doc = json.loads((Path(directory) / FILE).read_text(encoding="utf-8"))
        if doc.get("format") != FORMAT:
            return None
        attempts = [Attempt(**{**a, "faults": [Fault(**f) for f in a.get("faults", [])]}) for a in doc["attempts"]]
        return Attempts(restarts=doc["restarts"], spare_nodes=doc["spare_nodes"], attempts=attempts,
                        exclude_next=list(doc.get("exclude_next", [])), checkpoint_dir=doc.get("checkpoint_dir"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def status_line(job_dir: Optional[str]) -> Optional[str]:
    """``wml status``'s line for a job directory: its attempts, when ddlrun restarted it or one failed."""
    if not job_dir:
        return None
    rec = load(Path(job_dir))
    if rec is None or not rec.attempts or (len(rec.attempts) == 1 and rec.attempts[0].outcome != "failed"):
        return None
    return rec.one_line()
