"""The runtime's per-rank records of one job (``<job dir>/stats/rank<N>.json``, written by
ddl_runtime/core/stats.py), read into plain dataclasses.

A record is read as written: what is missing is said (ranks that wrote nothing, files that
cannot be read), never guessed.  Only the standard library and numpy: ddlrun uses this at the
end of every launch.
"""
from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import numpy as np

STATS_DIR = "stats"          # under a job's directory (DDL_STATS_DIR's default: $WML_JOB_DIR/stats)
FORMAT = 2                   # ddl_runtime.core.stats.FORMAT (wmlce_tools reads it, never imports it)
FORMATS = (1, 2)             # 1: before each rank measured its wait for the last rank (no ring_wait_s)


@dataclass
class RankRecord:
    rank: int
    size: int
    status: str                       # running | stopped | finished | aborted
    host: str
    node_index: int
    nodes: int
    local_rank: int
    gpu: Optional[int]
    cores: Optional[str]
    visible_gpus: Optional[str]
    steps: int
    first_step_s: Optional[float]
    step_s: float                     # steps 2..n, summed
    comm_s: float
    timed_steps: int
    bytes_reduced: int
    started: float
    written: float
    ring_first_step: int
    compute: np.ndarray               # the last steps one by one (seconds): step - comm (its own work)
    comm: np.ndarray                  # in collectives (transfer, and waiting for the last rank)
    wait: Optional[np.ndarray] = None  # of comm: waiting for the last rank (None: format 1; NaN: a step
    #                                    in which no agreement carried an arrival, not measured)
    wait_s: float = 0.0               # steps 2..n that measured it, summed
    arrivals: int = 0                 # agreements that carried this rank's arrival (0: no wait measured)
    waited_steps: int = 0             # timed steps that measured it
    argv: List[str] = field(default_factory=list)     # the program and its arguments
    run_step: Optional[int] = None    # the run's step reached (a checkpointed run's own numbering)
    resumed_from: Optional[int] = None  # the checkpoint's step this run resumed after
    checkpoint_step: Optional[int] = None  # the last step this run saved
    gpu_peak_bytes: Optional[int] = None
    lms: Optional[dict] = None

    @property
    def measured_wait(self) -> bool:
        """Whether this rank measured its wait for the last rank in every timed step."""
        return self.wait is not None and self.waited_steps == self.timed_steps

    @property
    def mean_step_s(self) -> Optional[float]:
        return self.step_s / self.timed_steps if self.timed_steps else None

    @property
    def mean_comm_s(self) -> Optional[float]:
        return self.comm_s / self.timed_steps if self.timed_steps else None

    @property
    def mean_wait_s(self) -> Optional[float]:
        return self.wait_s / self.waited_steps if self.waited_steps and self.wait is not None else None


@dataclass
class JobRecords:
    """Every rank's record of one job (or one trial, or one segment)."""
    directory: Path
    size: int                                   # the job's ranks (from the records)
    ranks: List[RankRecord]                     # by rank
    missing: List[int] = field(default_factory=list)      # ranks that wrote no record
    unreadable: List[str] = field(default_factory=list)   # file: why

    @property
    def partial(self) -> bool:
        return bool(self.missing or self.unreadable)

    @property
    def status(self) -> str:
        states = {r.status for r in self.ranks}
        for s in ("aborted", "running", "stopped", "finished"):
            if s in states:
                return s
        return "unknown"


def _ring(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float64) if text else np.zeros(0)


def _record(data: dict) -> RankRecord:
    return RankRecord(
        rank=int(data["rank"]), size=int(data["size"]), status=str(data.get("status", "unknown")),
        host=str(data.get("host", "?")), node_index=int(data.get("node_index") or 0), nodes=int(data.get("nodes") or 1),
        local_rank=int(data.get("local_rank") or 0), gpu=data.get("gpu"), cores=data.get("cores"),
        visible_gpus=data.get("visible_gpus"), steps=int(data.get("steps", 0)),
        first_step_s=data.get("first_step_s"), step_s=float(data.get("step_s", 0.0)),
        comm_s=float(data.get("comm_s", 0.0)), timed_steps=int(data.get("timed_steps", 0)),
        bytes_reduced=int(data.get("bytes_reduced", 0)), started=float(data.get("started", 0.0)),
        written=float(data.get("written", 0.0)), ring_first_step=int(data.get("ring_first_step", 0)),
        compute=_ring(data.get("ring_compute_s", "")), comm=_ring(data.get("ring_comm_s", "")),
        wait=_ring(data["ring_wait_s"]) if "ring_wait_s" in data else None,
        wait_s=float(data.get("wait_s") or 0.0), arrivals=int(data.get("arrivals") or 0),
        waited_steps=int(data.get("waited_steps") or 0),
        argv=[str(a) for a in data.get("argv") or []], run_step=_int(data.get("run_step")),
        resumed_from=_int(data.get("resumed_from")), checkpoint_step=_int(data.get("checkpoint_step")),
        gpu_peak_bytes=data.get("gpu_peak_bytes"), lms=data.get("lms"))


def _int(v) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def load(directory: Path) -> Optional[JobRecords]:
    """The records in ``directory`` (None: no record at all, or no such directory)."""
    directory = Path(directory)
    try:
        names = [n for n in os.listdir(directory) if n.startswith("rank") and n.endswith(".json")]
    except OSError:
        return None
    ranks: List[RankRecord] = []
    unreadable: List[str] = []
    for name in names:
        path = directory / name
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("format") not in FORMATS:
                raise ValueError(f"format {data.get('format')!r}, this wml reads formats "
                                 f"{', '.join(map(str, FORMATS))}")
            ranks.append(_record(data))
        except (OSError, ValueError, KeyError, TypeError) as e:
            unreadable.append(f"{name}: {e}")
    if not ranks and not unreadable:
        return None
    ranks.sort(key=lambda r: r.rank)
    size = max((r.size for r in ranks), default=0)
    have = {r.rank for r in ranks}
    missing = [i for i in range(size) if i not in have]
    return JobRecords(directory, size, ranks, missing, sorted(unreadable))


def step_reached(ranks: List[RankRecord]) -> Optional[int]:
    """The run's step its ranks reached (a checkpointed run's own numbering, across a chain's
    segments); None when the program passed no step boundary of ddl_runtime.checkpoint."""
    steps = [r.run_step for r in ranks if r.run_step is not None]
    return max(steps) if steps else None


def rank0_step_reached(directory: Path) -> Optional[int]:
    """step_reached from rank 0's record alone (one small file: ``wml jobs`` lists many runs);
    None when it is missing or unreadable."""
    try:
        data = json.loads((Path(directory) / "rank0.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return _int(data.get("run_step")) if isinstance(data, dict) and data.get("format") in FORMATS else None
