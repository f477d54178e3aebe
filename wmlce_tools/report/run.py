"""What ``wml report RUN`` reports on: a job, a chained run (its segments) or a sweep (its
trials), found from what the user typed, with each part's records (records.py) and what they
say (analysis.py).

RUN is what ``wml status`` takes (the scheduler's id, ``@N``, a run id) or a directory: a job's,
a chain's or a sweep's run directory, or a directory of rank records.  A run with no record at
all is one line that says what it has and what it lacks (``WmlError``); a part without records
is shown as such beside the others.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import WmlError
from ..runstats import records as _records
from ..runstats.analysis import Analysis, analyse, one_line, partial_note


@dataclass
class Part:
    """One job's worth of records: a plain job, a chain's segment or a sweep's trial."""
    label: str                          # "job 123", "segment 2/3", "trial 4"
    directory: Path                     # its records' directory (where they are, or would be)
    state: str                          # the scheduler's / the trial's state, as wml knows it
    records: Optional[_records.JobRecords] = None
    analysis: Optional[Analysis] = None
    submitted: Optional[float] = None
    started: Optional[float] = None
    ended: Optional[float] = None
    step: Optional[int] = None          # a segment's checkpoint step
    params: Dict[str, str] = field(default_factory=dict)     # a trial's
    metrics: Optional[dict] = None

    @property
    def line(self) -> str:
        if self.analysis is None:
            return f"no run records ({lacking(self.directory, self.state)})"
        return one_line(self.analysis)


@dataclass
class Report:
    kind: str                           # "job" | "chain" | "sweep"
    title: str
    parts: List[Part]
    site: str = ""
    run_dir: Optional[Path] = None
    notes: List[str] = field(default_factory=list)
    metric: Optional[str] = None        # a sweep's metric and its direction
    maximize: bool = False

    @property
    def main(self) -> Optional[Part]:
        """The part whose ranks the page shows: the job, the chain's last segment with records,
        the sweep's best trial with records."""
        with_records = [p for p in self.parts if p.analysis is not None]
        if not with_records:
            return None
        if self.kind == "sweep":
            ranked = best_trials(self, len(self.parts))
            for p in ranked:
                if p.analysis is not None:
                    return p
        return with_records[-1]


def lacking(where: Path, state: str) -> str:
    if state in ("PENDING", "QUEUED", "NOT RUN"):
        why = "it has not started: the ranks write their records as they run"
    elif state == "RUNNING":
        why = "it is running and no rank has written one yet (at a step boundary every DDL_STATS_INTERVAL_S, default 60 s, and at finalize)"
    else:
        why = ("its ranks wrote none: killed before the first record, not a ddl_runtime program, or a program "
               "that never started the runtime")
    return f"{state.lower()}; no records in {where}: {why}"


def _part(label: str, stats_dir: Path, state: str, **kw) -> Part:
    recs = _records.load(stats_dir)
    p = Part(label, stats_dir, state, recs, **kw)
    if recs is not None and recs.ranks:
        p.analysis = analyse(recs)
        p.started = p.started or min(r.started for r in recs.ranks)
        p.ended = p.ended or max(r.written for r in recs.ranks)
    return p


def find_report(run, metric: Optional[str] = None, maximize: bool = False) -> Report:
    """The report of ``run``: text as ``wml status`` takes it, a directory, or an API Job/Sweep."""
    run_dir = getattr(run, "run_dir", None)
    text = str(run_dir if run_dir is not None else run)
    p = Path(text)
    if p.is_dir():
        return _from_directory(p.resolve(), metric, maximize)
    from ..jobs.lifecycle import find
    from ..jobs.registry import Registry

    rec = find(text)
    from ..runs.sweep_view import sweep_of

    reg = Registry()
    sweep = sweep_of(rec, reg)
    if sweep is not None:
        return _sweep(sweep, metric, maximize)
    from ..runs.chain_view import chain_of

    chain = chain_of(rec, reg)
    if chain is not None:
        return _chain(chain)
    from ..jobs.lifecycle import refresh
    from ..schedulers import SchedulerError

    try:
        rec = refresh(rec, reg)
    except (SchedulerError, WmlError):
        pass                             # its last known state
    return _job(rec)


def _job(rec) -> Report:
    label = f"job {rec.job_id}"
    part = _part(label, Path(rec.job_dir) / _records.STATS_DIR, rec.state.value, submitted=rec.submitted_at)
    return Report("job", f"{label} ({rec.name}, {rec.site})", [part], site=rec.site, run_dir=Path(rec.job_dir))


def _chain(view) -> Report:
    from ..chain import record as chain_record

    parts = []
    for s in view.segments:
        entry = next(e for e in view.rec.segments if e.index == s.index)
        job_dir = Path(entry.job_dir)
        end = chain_record.segment_end(job_dir) or {}
        step = end.get("step", s.step)
        parts.append(_part(f"segment {s.index}/{view.rec.length}", job_dir / _records.STATS_DIR, s.state,
                           submitted=s.job.submitted_at if s.job else None, step=step))
    return Report("chain", f"run {view.rec.run_id} ({view.rec.site}, chain of {view.rec.length}): {view.state}",
                  parts, site=view.rec.site, run_dir=view.run_dir)


def _sweep(view, metric: Optional[str], maximize: bool) -> Report:
    from ..sweeps import record as sweep_record

    parts = []
    for t in view.trials:
        d = sweep_record.trial_dir(view.run_dir, t.index)
        parts.append(_part(f"trial {t.index}", d / _records.STATS_DIR, t.state, started=t.start,
                           ended=t.end, params=dict(t.params), metrics=t.metrics))
    rep = Report("sweep", f"sweep {view.rec.run_id} ({view.rec.site}, {view.rec.size} trials, {view.rec.mode}): "
                 f"{view.state}", parts, site=view.rec.site, run_dir=view.run_dir)
    rep.metric, rep.maximize = _choose_metric(parts, metric), maximize
    return rep


def _from_directory(d: Path, metric: Optional[str], maximize: bool) -> Report:
    from ..chain import record as chain_record
    from ..sweeps import record as sweep_record

    if (d / sweep_record.SWEEP_FILE).is_file():
        from ..runs.sweep_view import view

        return _sweep(view(d, sweep_record.require(d)), metric, maximize)
    if (d / chain_record.CHAIN_FILE).is_file():
        from ..runs.chain_view import chain_of
        from ..jobs.registry import JobRecord, Registry

        rec = chain_record.load(d)
        first = rec.segments[0] if rec and rec.segments else None
        probe = JobRecord(site=rec.site, scheduler=rec.scheduler, job_id=first.job_id or "-",
                          job_dir=first.job_dir) if first else None
        view = chain_of(probe, Registry()) if probe else None
        if view is None:
            raise WmlError(f"{d} is a chain's run directory without segments")
        return _chain(view)
    stats = d if any(d.glob("rank*.json")) else d / _records.STATS_DIR
    if not stats.is_dir() and not (d / "job.sh").is_file():
        raise WmlError(f"{d} is not a job's, a chain's or a sweep's directory, nor a directory of rank records "
                       f"(no {_records.STATS_DIR}/, job.sh, chain.json or sweep.json)")
    state = "ENDED" if stats.is_dir() else "UNKNOWN"
    part = _part(f"job {d.name}", stats, state)
    return Report("job", f"job directory {d}", [part], run_dir=d)


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _choose_metric(parts: List[Part], metric: Optional[str]) -> Optional[str]:
    names: List[str] = []
    for p in parts:
        for k, v in (p.metrics or {}).items():
            if _numeric(v) and k not in names:
                names.append(k)
    if metric is not None:
        if metric not in names:
            have = ", ".join(names) if names else "none: no trial printed a JSON object of metrics yet"
            raise WmlError(f"--metric {metric}: no trial has a numeric metric of that name (metrics: {have})")
        return metric
    return names[0] if names else None


def best_trials(rep: Report, n: int = 5) -> List[Part]:
    if rep.metric is None:
        return []
    scored = [p for p in rep.parts if p.metrics and _numeric(p.metrics.get(rep.metric))]
    scored.sort(key=lambda p: p.metrics[rep.metric], reverse=rep.maximize)
    return scored[:n]


def check_has_records(rep: Report) -> None:
    """A run with no record at all: one line saying what it has and what it lacks."""
    if any(p.records is not None for p in rep.parts):
        return
    if rep.kind == "sweep" and rep.metric is not None:
        return                           # its trials' metrics are worth a report of their own
    if rep.kind == "job":
        p = rep.parts[0]
        raise WmlError(f"{p.label}: {lacking(p.directory, p.state)}")
    states: Dict[str, int] = {}
    for p in rep.parts:
        states[p.state] = states.get(p.state, 0) + 1
    has = ", ".join(f"{n} {s.lower()}" for s, n in states.items())
    what = "segments" if rep.kind == "chain" else "trials"
    metrics = sum(1 for p in rep.parts if p.metrics)
    extra = f"; {metrics} trial{'s' if metrics != 1 else ''} printed metrics (wml sweep show)" if metrics else ""
    raise WmlError(f"{rep.title}: no run records in any of its {len(rep.parts)} {what} ({has}){extra}; each part's "
                   f"ranks write them as they run")


def one_line_status(rep: Report) -> Optional[str]:
    """The line ``wml status`` adds: the job's, or the chain's last segment's with records."""
    main = rep.main
    if main is None:
        return None
    return f"{main.label}: {one_line(main.analysis)}" if rep.kind != "job" else one_line(main.analysis)


def stamp(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) if t else "-"


__all__ = ["Report", "Part", "find_report", "check_has_records", "best_trials", "partial_note", "one_line_status"]
