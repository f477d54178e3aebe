"""A chain segment whose checkpoint save the walltime cut short: the runtime's ``saving.json``
(``ddl_runtime.checkpoint.protocol.SAVING_FILE``) left in the checkpoint directory when the job
ended.  What the user is told, with the figures (the margin, how long after the stop signal the
save began and how long it had run, how long the last complete save took), and whether the
segment made progress: without a new checkpoint the next segment would resume from the same one
and be cut short the same way, so the chain stops there instead of looping."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: where a reported cut-short save is kept, in the segment's directory
CUT_FILE = "cut-save.json"


@dataclass(frozen=True)
class CutSave:
    step: int                       # the checkpoint being written
    started: float                  # when rank 0 began writing it (time.time())
    stop_asked: Optional[float]     # when rank 0 got the stop signal
    last_step: Optional[int]        # the checkpoint latest.json still names (None: none)
    last_save_s: Optional[float]    # how long that one's save took


def cut_save(checkpoint_dir: Path) -> Optional[CutSave]:
    """The save the runtime began and never finished in ``checkpoint_dir`` (None: there is none)."""
    from ddl_runtime.checkpoint.protocol import LATEST_FILE, SAVING_FILE

    try:
        doc = json.loads((Path(checkpoint_dir) / SAVING_FILE).read_text())
        step, started = int(doc["step"]), float(doc["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    asked = doc.get("stop_asked")
    try:
        latest = json.loads((Path(checkpoint_dir) / LATEST_FILE).read_text())
    except (OSError, ValueError):
        latest = {}
    last_step = latest.get("step") if isinstance(latest.get("step"), int) else None
    last_save = latest.get("save_s") if isinstance(latest.get("save_s"), (int, float)) else None
    return CutSave(step, started, float(asked) if isinstance(asked, (int, float)) else None, last_step, last_save)


def describe(cut: CutSave, index: int, length: int, signal: str, margin_s: Optional[int],
             walltime_at: Optional[float] = None) -> str:
    """One line: segment ``index`` reached its walltime while saving, with the figures."""
    parts = []
    if margin_s is not None:
        parts.append(f"SIG{signal} came {margin_s} s before the walltime (--signal-margin)")
    if cut.stop_asked is not None:
        parts.append(f"the ranks began the save {max(cut.started - cut.stop_asked, 0.0):.1f} s after it")
    if walltime_at is not None:
        parts.append(f"it had run {max(walltime_at - cut.started, 0.0):.1f} s when the walltime came")
    else:
        parts.append("it never completed (the job ended at its walltime)")
    if cut.last_save_s is not None:
        parts.append(f"the last complete save (step {cut.last_step}) took {cut.last_save_s:.1f} s")
    need = (f" more than {margin_s} s" if margin_s is not None else "")
    return (f"segment {index} of {length} reached its walltime while saving the checkpoint of step {cut.step}: "
            f"the save overran the signal margin ({'; '.join(parts)}); give --signal-margin{need}: the time to "
            f"the next step boundary plus the whole save")


def made_progress(cut: CutSave, step_at_start: Optional[int]) -> bool:
    """Whether the segment left a newer checkpoint than the one it started from."""
    return cut.last_step is not None and (step_at_start is None or cut.last_step > step_at_start)


def stop_line(index: int, length: int, cut: CutSave, checkpoint_dir: Path, margin_s: Optional[int]) -> str:
    at = f"step {cut.last_step}" if cut.last_step is not None else "none"
    more = f" (more than {margin_s} s)" if margin_s is not None else ""
    left = length - index
    return (f"the chain stops after segment {index} of {length}: it made no progress (its last checkpoint is "
            f"still {at}), and each next segment would be cut short the same way; continue it with a longer "
            f"signal margin{more}: wml submit --chain {left} --checkpoint-dir {checkpoint_dir} --signal-margin "
            f"... and the same program")


def set_aside(checkpoint_dir: Path, segment_dir: Path) -> None:
    """Move the reported ``saving.json`` into the segment's directory (``cut-save.json``), so that
    it is told once; the next save writes a new one."""
    from ddl_runtime.checkpoint.protocol import SAVING_FILE

    try:
        segment_dir.mkdir(parents=True, exist_ok=True)
        os.replace(Path(checkpoint_dir) / SAVING_FILE, segment_dir / CUT_FILE)
    except OSError:
        pass


def after_previous(run_dir: Path, index: int, checkpoint_dir: Path, signal: str, say) -> Optional[int]:
    """At the start of segment ``index`` (a batch scheduler's job; the local site's runner tells it
    itself): segment ``index - 1``'s save cut short by its walltime is said, with the figures, and
    set aside; when that segment made no progress the chain stops here: the segments still queued
    are cancelled and the exit status (1) returned.  None: go on."""
    from . import record

    cut = cut_save(checkpoint_dir)
    if cut is None or index < 2:
        return None
    rec = record.load(run_dir)
    length = rec.length if rec is not None else index
    margin = rec.margin_s if rec is not None else None
    previous = index - 1
    say(describe(cut, previous, length, signal, margin))
    set_aside(checkpoint_dir, run_dir / f"segment-{previous}")
    if made_progress(cut, record.start_step(run_dir, previous)):
        return None
    say(stop_line(previous, length, cut, checkpoint_dir, margin))
    if rec is not None:
        from .segment_end import cancel_rest

        cancelled = cancel_rest(rec, index)
        if cancelled:
            say(f"cancelled the segments still queued: {' '.join(cancelled)}")
    (run_dir / f"segment-{index}").mkdir(parents=True, exist_ok=True)
    record.write_json_atomic(run_dir / f"segment-{index}" / record.END_FILE,
                             {"status": 1, "step": cut.last_step, "stopped": "no progress: a save cut short"})
    return 1
