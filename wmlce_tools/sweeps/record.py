"""A sweep's run directory, the one place its results live::

    <run>/sweep.json              the sweep: site, mode, program, every trial's parameters,
                                  each submission's job id (written whole, then renamed)
    <run>/submit-<k>/job.sh       submission k's script (1: the sweep, 2..: each resume)
    <run>/trials/<i>/state.json   trial i: state, exit status, start/end, walltime, where it
                                  ran, its metrics (the last JSON object line it printed)
    <run>/trials/<i>/output.log   trial i's output (every rank's, as ddlrun prints it)

Every JSON file is replaced whole (temp file + rename): a reader never sees half of one.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import WmlError
from ..atomic import write_json_atomic

SWEEP_FILE = "sweep.json"
STATE_FILE = "state.json"
OUTPUT_FILE = "output.log"
RESULT_FILE = "result.pkl"

#: a trial's states (its state.json); a trial with no state.json has not started
RUNNING, COMPLETED, FAILED, CANCELLED = "RUNNING", "COMPLETED", "FAILED", "CANCELLED"
TIMEOUT = "TIMEOUT"         # ended by its job's walltime (SIGTERM at or after WML_JOB_DEADLINE)
#: the environment variable the job script sets to its walltime's end (seconds since the epoch)
DEADLINE_VAR = "WML_JOB_DEADLINE"
PENDING, MISSING = "PENDING", "MISSING"     # no state.json: its job is live / has ended


@dataclass
class SweepRecord:
    run_id: str
    site: str
    scheduler: str
    mode: str                          # "array" | "packed"
    program: List[str]                 # the program with its {name} fields
    trials: List[Dict[str, str]]       # trial i's parameters
    max_running: Optional[int] = None
    pack_nodes: Optional[int] = None
    job_ids: List[str] = field(default_factory=list)    # each submission's (1: the sweep, 2..: resumes)
    created: float = field(default_factory=time.time)
    why: str = ""                      # why array or packed (the dry run says it too)
    pack: Optional[dict] = None        # packed: {"allocation": ..., "need": ..., "gpu_env": ...}
    request: Optional[dict] = None     # one trial's ResourceRequest (wml sweep resume plans it again)
    workdir: Optional[str] = None      # where the sweep was submitted from (relative program paths)

    @property
    def size(self) -> int:
        return len(self.trials)



def save(run_dir: Path, rec: SweepRecord) -> None:
    write_json_atomic(run_dir / SWEEP_FILE, asdict(rec), indent=1)


def load(run_dir: Path) -> Optional[SweepRecord]:
    try:
        data = json.loads((Path(run_dir) / SWEEP_FILE).read_text())
    except (OSError, ValueError):
        return None
    known = SweepRecord.__dataclass_fields__
    return SweepRecord(**{k: v for k, v in data.items() if k in known})


def run_dir_of(job_dir: str) -> Optional[Path]:
    """The sweep a job directory (``<run>/submit-<k>``) belongs to, or None."""
    if not job_dir:
        return None
    parent = Path(job_dir).parent
    return parent if (parent / SWEEP_FILE).is_file() else None


def trial_dir(run_dir: Path, index: int) -> Path:
    return Path(run_dir) / "trials" / str(index)


def read_state(run_dir: Path, index: int) -> Optional[dict]:
    try:
        return json.loads((trial_dir(run_dir, index) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def write_state(run_dir: Path, index: int, state: dict) -> None:
    d = trial_dir(run_dir, index)
    d.mkdir(parents=True, exist_ok=True)
    write_json_atomic(d / STATE_FILE, state, indent=1)


def require(run_dir: Path) -> SweepRecord:
    rec = load(run_dir)
    if rec is None:
        raise WmlError(f"{run_dir} is not a sweep's run directory (no readable {SWEEP_FILE})")
    return rec


def last_json_object(lines: List[str]) -> Optional[dict]:
    """The last line that is a JSON object (a trial's metrics), ddlrun's ``[rank]`` prefix allowed."""
    for line in reversed(lines):
        text = line.strip()
        if text.startswith("[") and "]" in text and not text.startswith("[{"):
            tag, text = text[1:].split("]", 1)
            if tag.strip() != "0":          # rank 0's metrics (ddlrun prefixes each rank's lines)
                continue
            text = text.strip()
        if text.startswith("{") and text.endswith("}"):
            try:
                obj = json.loads(text)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    return None
