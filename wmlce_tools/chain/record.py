"""A chained run's directory: ``chain.json`` (the run and every segment's job id, written by
``wml submit`` as each is submitted) and ``segment-<k>/end.json`` (how segment k ended,
written by its job script).  ``wml jobs``, ``status`` and ``logs`` read both, and
``latest.json`` in the checkpoint directory for the step reached."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import List, Optional

from ..atomic import write_json_atomic  # noqa: F401 (segment_end uses record.write_json_atomic)

CHAIN_FILE = "chain.json"
END_FILE = "end.json"
START_FILE = "start.json"     # segment-<k>/start.json: the checkpoint step it started from, and when


@dataclass
class SegmentEntry:
    index: int
    job_dir: str
    job_id: Optional[str] = None      # None until submitted


@dataclass
class ChainRecord:
    run_id: str
    site: str
    scheduler: str
    length: int
    checkpoint_dir: str
    segments: List[SegmentEntry] = field(default_factory=list)
    excluded: List[str] = field(default_factory=list)   # nodes that failed with no spare: later segments avoid them
    margin_s: Optional[int] = None    # the stop signal comes this long before the walltime

    def job_ids_after(self, index: int) -> List[str]:
        return [s.job_id for s in self.segments if s.index > index and s.job_id]



def save(run_dir: Path, rec: ChainRecord) -> None:
    write_json_atomic(run_dir / CHAIN_FILE, asdict(rec))


def load(run_dir: Path) -> Optional[ChainRecord]:
    try:
        d = json.loads((run_dir / CHAIN_FILE).read_text())
        d["segments"] = [SegmentEntry(**s) for s in d.get("segments", [])]
        return ChainRecord(**d)
    except (OSError, ValueError, TypeError):
        return None


def run_dir_of(job_dir: str) -> Optional[Path]:
    """The run directory a segment's job directory belongs to (None: not part of a chain)."""
    if not job_dir:
        return None
    parent = Path(job_dir).parent
    return parent if (parent / CHAIN_FILE).is_file() else None


def latest_step(checkpoint_dir: Path) -> Optional[int]:
    """The step ``latest.json`` names (None: no checkpoint yet, or unreadable)."""
    from ddl_runtime.checkpoint.protocol import LATEST_FILE

    try:
        step = json.loads((checkpoint_dir / LATEST_FILE).read_text()).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def write_start(run_dir: Path, index: int, checkpoint_dir: Path) -> None:
    """segment-<index>/start.json: the step the segment starts from (a later segment tells from it
    whether this one made progress)."""
    import time

    seg = run_dir / f"segment-{index}"
    seg.mkdir(parents=True, exist_ok=True)
    write_json_atomic(seg / START_FILE, {"step": latest_step(checkpoint_dir), "time": time.time()})


def start_step(run_dir: Path, index: int) -> Optional[int]:
    """The checkpoint step segment ``index`` started from (None: none, or not recorded)."""
    try:
        step = json.loads((run_dir / f"segment-{index}" / START_FILE).read_text()).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def finished(checkpoint_dir: Path) -> bool:
    from ddl_runtime.checkpoint.protocol import FINISHED_FILE

    return (checkpoint_dir / FINISHED_FILE).exists()


def segment_end(job_dir: Path) -> Optional[dict]:
    """What segment_end wrote when the segment ended: status, step, finished."""
    try:
        return json.loads((job_dir / END_FILE).read_text())
    except (OSError, ValueError):
        return None
