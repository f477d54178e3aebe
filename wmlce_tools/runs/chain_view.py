"""A chained run as ``wml jobs`` / ``status`` / ``logs`` show it: one run, its segments in
order, each with its job id, state, the step its ranks reached (their records: the runtime's
checkpoint layer writes the run's step there) and the last checkpoint when it ended."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional


from ..jobs.registry import JobRecord, Registry
from ..chain import record
from ..runstats.records import STATS_DIR, rank0_step_reached


@dataclass
class SegmentView:
    index: int
    job: Optional[JobRecord]          # None: not submitted (or, on the local site, not run)
    status: Optional[int]             # what its job script recorded at the end
    step: Optional[int]               # the last checkpoint's step when it ended
    reached: Optional[int] = None     # the step its ranks reached (rank 0's record)

    @property
    def state(self) -> str:
        if self.job is None:
            return "NOT RUN"
        from ddl_runtime.checkpoint.protocol import EXIT_RESUME

        if self.status == EXIT_RESUME or (self.job.exit_code == EXIT_RESUME and self.job.state.final):
            return "STOPPED"          # stopped for the walltime; the next segment resumes
        return self.job.state.value


@dataclass
class ChainView:
    run_dir: Path
    rec: record.ChainRecord
    segments: List[SegmentView]
    finished: bool

    @property
    def state(self) -> str:
        if self.finished:
            return "FINISHED"
        ran = [s for s in self.segments if s.job is not None]
        live = [s for s in ran if not s.job.state.final]
        if live:
            first = live[0]
            return f"{'RUNNING' if first.job.state.value == 'RUNNING' else 'PENDING'} (segment {first.index}/{self.rec.length})"
        return "NOT FINISHED"

    @property
    def step(self) -> Optional[int]:
        """The last checkpoint's step (latest.json)."""
        return record.latest_step(Path(self.rec.checkpoint_dir))

    @property
    def reached(self) -> Optional[int]:
        """The step the run's ranks reached (the furthest segment's records)."""
        return max((s.reached for s in self.segments if s.reached is not None), default=None)

    def lines(self) -> List[str]:
        out = [f"run {self.rec.run_id} ({self.rec.site}, chain of {self.rec.length}): {self.state}"
               + steps_text(self.reached, self.step, ", ")]
        out.append(f"  run directory {self.run_dir}; checkpoints {self.rec.checkpoint_dir}")
        for s in self.segments:
            job = s.job
            code = f" exit {job.exit_code}" if job is not None and job.exit_code is not None else ""
            out.append(f"  segment {s.index}/{self.rec.length}: job {job.job_id if job else '-'} {s.state}{code}"
                       + steps_text(s.reached, s.step, "; ") + (f"; output {job.output}" if job else ""))
        return out


def steps_text(reached: Optional[int], checkpoint: Optional[int], lead: str) -> str:
    """``, reached step 1499, last checkpoint 1041`` (each only where known; "" for neither)."""
    words = [w for w in (f"reached step {reached}" if reached is not None else "",
                         f"last checkpoint {checkpoint}" if checkpoint is not None else "") if w]
    return lead + ", ".join(words) if words else ""


def chain_of(job: JobRecord, registry: Registry, refresh: bool = True) -> Optional[ChainView]:
    """The run ``job`` is a segment of (None: a plain job)."""
    run_dir = record.run_dir_of(job.job_dir)
    rec = record.load(run_dir) if run_dir else None
    if rec is None:
        return None
    from ..jobs.lifecycle import refresh as do_refresh
    from ..schedulers import SchedulerError
    from ..errors import WmlError

    views = []
    for entry in rec.segments:
        seg_job = None
        if entry.job_id:
            try:
                seg_job = registry.get(entry.job_id, site=rec.site)
            except WmlError:
                seg_job = None
            if seg_job is not None and refresh and not seg_job.state.final:
                try:
                    seg_job = do_refresh(seg_job, registry)
                except (SchedulerError, WmlError):
                    pass       # last known state
        end = record.segment_end(Path(entry.job_dir)) or {}
        reached = rank0_step_reached(Path(entry.job_dir) / STATS_DIR) if seg_job is not None else None
        views.append(SegmentView(entry.index, seg_job, end.get("status"), end.get("step"), reached))
    return ChainView(run_dir, rec, views, record.finished(Path(rec.checkpoint_dir)))
