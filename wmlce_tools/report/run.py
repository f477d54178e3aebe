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
from ..quoting import sh_join
from ..runstats import records as _records
from ..runstats.analysis import Analysis, analyse, one_line, partial_note

COMPLETED = "COMPLETED"     # the one trial state a "best" trial may have (sweeps/record.py)


@dataclass
class Span:
    """One bar of the report's timeline: on a part's row, what it was (its colour and legend:
    SPAN_KINDS in page.py), from when to when, and a note for its hover text.  A part gives its
    spans (Part.spans); other events of a run (in-job restarts, say) are more spans."""
    row: str
    kind: str                           # "queued" | "ran"
    start: float
    end: float
    note: str = ""


@dataclass(eq=False)
class Part:
    """One job's worth of records: a plain job, a chain's segment or a sweep's trial (compared by
    identity: its records hold arrays)."""
    label: str                          # "job 123", "segment 2/3", "trial 4"
    directory: Path                     # its records' directory (where they are, or would be)
    state: str                          # the scheduler's / the trial's state, as wml knows it
    records: Optional[_records.JobRecords] = None
    analysis: Optional[Analysis] = None
    submitted: Optional[float] = None
    started: Optional[float] = None
    ended: Optional[float] = None
    step_reached: Optional[int] = None  # the run's step its ranks reached (their records)
    checkpoint: Optional[int] = None    # the last checkpoint's step when it ended (a chain's segment)
    params: Dict[str, str] = field(default_factory=dict)     # a trial's, in `wml sweep show`'s order
    metrics: Optional[dict] = None
    exit_code: Optional[int] = None
    walltime_s: Optional[float] = None

    @property
    def line(self) -> str:
        if self.analysis is None:
            return f"no run records ({lacking(self.directory, self.state)})"
        return one_line(self.analysis)

    @property
    def steps_text(self) -> str:
        """``reached step 1499, last checkpoint 1041`` (each only where known)."""
        words = []
        if self.step_reached is not None:
            words.append(f"reached step {self.step_reached}")
        if self.checkpoint is not None:
            words.append(f"last checkpoint {self.checkpoint}")
        return ", ".join(words)

    def spans(self) -> List[Span]:
        out = []
        if self.submitted and self.started and self.started > self.submitted:
            out.append(Span(self.label, "queued", self.submitted, self.started))
        if self.started and self.ended:
            out.append(Span(self.label, "ran", self.started, self.ended,
                            "; ".join(x for x in (self.state, self.steps_text) if x)))
        return out + self.attempt_spans()

    def attempt_spans(self) -> List[Span]:
        """ddlrun --restarts (runstats/attempts.py): each attempt on a row of its own below the
        part's, a failed one marked, and from each fault to the first step after its restart."""
        from ..runstats.attempts import load

        rec = load(self.directory.parent if self.directory.name == "stats" else self.directory)
        if rec is None or not rec.attempts or (len(rec.attempts) == 1 and rec.attempts[0].outcome != "failed"):
            return []
        row, out = f"{self.label} attempts", []
        for i, a in enumerate(rec.attempts):
            end = a.ended or a.fault_at
            if a.started and end:
                what = "; ".join(f.describe() for f in a.faults) or a.outcome
                out.append(Span(row, "failed attempt" if a.outcome == "failed" else "attempt", a.started, end,
                                f"attempt {a.index} on {', '.join(a.nodes)}: {what}"))
            nxt = rec.attempts[i + 1] if i + 1 < len(rec.attempts) else None
            lost, redone = rec.time_lost_s(i), rec.steps_redone(i)
            if nxt is not None and lost is not None:
                out.append(Span(row, "restart", a.fault_at, nxt.first_step_at,
                                f"{lost:.1f} s lost" + (f", {redone} step(s) redone" if redone is not None else "")))
        return out


@dataclass
class RunInfo:
    """What ran: the program and its arguments, where, on how many nodes and ranks, when, for
    how long and how it ended (the summary's first line and the page's head)."""
    program: str = ""                   # shell-quoted; "" when no record says
    site: str = ""
    layout: str = ""                    # "2 nodes x 2 ranks"
    start: Optional[float] = None
    wall_s: Optional[float] = None
    ended: str = ""                     # "exit 0 (COMPLETED)", a chain's or a sweep's outcome

    def line(self) -> str:
        words = [self.program or "program not recorded"]
        if self.site:
            words[0] += f" on {self.site}"
        if self.layout:
            words.append(self.layout)
        if self.start:
            words.append(f"started {stamp(self.start)} UTC")
        if self.wall_s is not None:
            words.append(f"ran {duration(self.wall_s)}")
        if self.ended:
            words.append(self.ended)
        return ", ".join(words)


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
    run: RunInfo = field(default_factory=RunInfo)
    columns: List[str] = field(default_factory=list)      # a sweep's trial table, as `wml sweep show`
    rows: List[dict] = field(default_factory=list)

    @property
    def main(self) -> Optional[Part]:
        """The part whose ranks the page shows: the job, the chain's last segment with records,
        the sweep's best trial with records (else its last completed one, else its last)."""
        with_records = [p for p in self.parts if p.analysis is not None]
        if not with_records:
            return None
        if self.kind == "sweep":
            for p in best_trials(self, len(self.parts)):
                if p.analysis is not None:
                    return p
            done = [p for p in with_records if p.state == COMPLETED]
            if done:
                return done[-1]
        return with_records[-1]

    @property
    def main_why(self) -> str:
        """Why the main part is the one shown (a chain's, a sweep's)."""
        main = self.main
        if main is None or self.kind == "job":
            return ""
        if self.kind == "chain":
            return "the last segment with records"
        ranked = best_trials(self, len(self.parts))
        if ranked and ranked[0] is main:
            return f"the best trial by {self.metric}"
        if any(p is main for p in ranked):
            return f"the best trial with records by {self.metric}"
        why = ("no completed trial printed a numeric metric" if self.metric is None or not best_trials(self, 1)
               else "the best trials have no records")
        return f"the last {'completed ' if main.state == COMPLETED else ''}trial with records; {why}"

    def timeline(self) -> List[Span]:
        """Every bar of the run's timeline, part by part."""
        return [s for p in self.parts for s in p.spans()]


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
        p.step_reached = _records.step_reached(recs.ranks)
    return p


def _layout(recs: Optional[_records.JobRecords]) -> str:
    """``2 nodes x 2 ranks`` (``5 ranks on 2 nodes`` when the nodes hold different numbers)."""
    if recs is None or not recs.ranks:
        return ""
    per_node: Dict[int, int] = {}
    for r in recs.ranks:
        per_node[r.node_index] = per_node.get(r.node_index, 0) + 1
    nodes = max(max(r.nodes for r in recs.ranks), len(per_node))
    ranks = recs.size or len(recs.ranks)
    if ranks % nodes == 0 and not recs.missing and len(set(per_node.values())) == 1:
        each = ranks // nodes
        return f"{nodes} node{'s' if nodes != 1 else ''} x {each} rank{'s' if each != 1 else ''}"
    return f"{ranks} ranks on {nodes} nodes"


def _program(recs: Optional[_records.JobRecords]) -> str:
    argv = next((r.argv for r in (recs.ranks if recs else []) if r.argv), None)
    return sh_join(argv) if argv else ""


def _run_info(main: Optional[Part], site: str, ended: str, parts: List[Part], program: str = "") -> RunInfo:
    recs = main.records if main is not None else None
    starts = [p.started for p in parts if p.started]
    ran = [(p.started, p.ended) for p in parts if p.started and p.ended]
    wall = sum(b - a for a, b in ran) if ran else None
    return RunInfo(program or _program(recs), site, _layout(recs), min(starts) if starts else None, wall, ended)


def _exit(code: Optional[int], state: str) -> str:
    if code is None:
        return state
    return f"exit {code} ({state})" if state else f"exit {code}"


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
    part = _part(label, Path(rec.job_dir) / _records.STATS_DIR, rec.state.value, submitted=rec.submitted_at,
                 exit_code=rec.exit_code)
    rep = Report("job", f"{label} ({rec.name})", [part], site=rec.site, run_dir=Path(rec.job_dir))
    rep.run = _run_info(part, rec.site, _exit(rec.exit_code, rec.state.value), [part])
    return rep


def _chain(view) -> Report:
    from ..chain import record as chain_record

    parts = []
    for s in view.segments:
        entry = next(e for e in view.rec.segments if e.index == s.index)
        job_dir = Path(entry.job_dir)
        end = chain_record.segment_end(job_dir) or {}
        code = end.get("status", s.job.exit_code if s.job else None)
        parts.append(_part(f"segment {s.index}/{view.rec.length}", job_dir / _records.STATS_DIR, s.state,
                           submitted=s.job.submitted_at if s.job else None, checkpoint=end.get("step", s.step),
                           exit_code=code if isinstance(code, int) else None))
    rep = Report("chain", f"run {view.rec.run_id} (chain of {view.rec.length})", parts, site=view.rec.site,
                 run_dir=view.run_dir)
    last = next((p for p in reversed(parts) if p.exit_code is not None), None)
    ended = view.state + (f", its last segment {last.label.split()[1]} {_exit(last.exit_code, last.state)}"
                          if last is not None else "")
    reached = max((p.step_reached for p in parts if p.step_reached is not None), default=None)
    ckpt = view.step
    ended += "".join(f", {w}" for w in (f"reached step {reached}" if reached is not None else "",
                                        f"last checkpoint {ckpt}" if ckpt is not None else "") if w)
    rep.run = _run_info(rep.main, view.rec.site, ended, parts)
    return rep


def _sweep(view, metric: Optional[str], maximize: bool) -> Report:
    from ..runs.sweep_view import rows
    from ..sweeps import record as sweep_record

    parts = []
    for t in view.trials:
        d = sweep_record.trial_dir(view.run_dir, t.index)
        parts.append(_part(f"trial {t.index}", d / _records.STATS_DIR, t.state, started=t.start,
                           ended=t.end, params=dict(t.params), metrics=t.metrics, exit_code=t.exit_code,
                           walltime_s=t.walltime_s))
    rep = Report("sweep", f"sweep {view.rec.run_id} ({view.rec.size} trials, {view.rec.mode})", parts,
                 site=view.rec.site, run_dir=view.run_dir)
    rep.metric, rep.maximize = _choose_metric(parts, metric), maximize
    rep.rows = rows(view)
    for r in rep.rows:
        rep.columns += [c for c in r if c not in rep.columns]
    rep.run = _run_info(rep.main, view.rec.site, f"{view.state}: {view.count_text()}", parts,
                        program=sh_join(view.rec.program))
    if rep.run.layout:
        rep.run.layout += " a trial"
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
    rep = Report("job", f"job directory {d}", [part], run_dir=d)
    status = part.records.status if part.records is not None else ""
    rep.run = _run_info(part, "", f"exit status not recorded here (the ranks' records: {status})" if status else "",
                        [part])
    return rep


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
    """The completed trials with the best values of the sweep's metric (none without a metric: a
    failed, cancelled or still running trial is never best, whatever it printed)."""
    if rep.metric is None:
        return []
    scored = [p for p in rep.parts if p.state == COMPLETED and p.metrics and _numeric(p.metrics.get(rep.metric))]
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


def duration(seconds: float) -> str:
    """``41 s``, ``12 min 5 s``, ``3 h 2 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.1f} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


__all__ = ["Report", "Part", "Span", "RunInfo", "find_report", "check_has_records", "best_trials", "partial_note", "one_line_status"]
