"""A sweep as ``wml jobs``, ``status``, ``logs``, ``cancel`` and ``sweep show`` see it: each
trial's state read from its ``state.json``, and the sweep's jobs from the registry (a trial
with no state.json is PENDING while a job of the sweep may still run it, MISSING once none
can; a RUNNING trial whose jobs have all ended was killed before it could say: FAILED)."""
from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import WmlError
from ..sweeps import record

ORDER = (record.PENDING, record.RUNNING, record.COMPLETED, record.FAILED, record.TIMEOUT, record.CANCELLED,
         record.MISSING)


@dataclass
class TrialView:
    index: int
    params: Dict[str, str]
    state: str
    exit_code: Optional[int] = None
    walltime_s: Optional[float] = None
    start: Optional[float] = None
    end: Optional[float] = None
    metrics: Optional[dict] = None
    attempt: int = 0
    placement: Optional[dict] = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SweepView:
    run_dir: Path
    rec: record.SweepRecord
    jobs: list                       # JobRecords of its submissions (registry), oldest first
    trials: List[TrialView] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return any(not j.state.final for j in self.jobs)

    @property
    def counts(self) -> Dict[str, int]:
        out = {s: 0 for s in ORDER}
        for t in self.trials:
            out[t.state] = out.get(t.state, 0) + 1
        return out

    @property
    def state(self) -> str:
        c = self.counts
        if c[record.RUNNING]:
            return "RUNNING"
        if c[record.PENDING]:
            return "PENDING"
        if c[record.COMPLETED] == len(self.trials):
            return "COMPLETED"
        ended = {j.state.value for j in self.jobs}
        if not c[record.FAILED]:
            # a trial its job never started (MISSING) ended as that job did
            if c[record.TIMEOUT] or c[record.MISSING] and ended == {"TIMEOUT"}:
                return "TIMEOUT"
            if c[record.CANCELLED] or c[record.MISSING] and ended == {"CANCELLED"}:
                return "CANCELLED"
        return "FAILED"

    def count_text(self) -> str:
        c = self.counts
        words = [f"{c[s]} {s.lower()}" for s in ORDER if c[s] or s in (record.PENDING, record.RUNNING, "COMPLETED", "FAILED")]
        return ", ".join(words)


def trial_views(run_dir: Path, rec: record.SweepRecord, live: bool) -> List[TrialView]:
    out = []
    for i, params in enumerate(rec.trials):
        st = record.read_state(run_dir, i)
        if st is None:
            out.append(TrialView(i, params, record.PENDING if live else record.MISSING))
            continue
        state = st.get("state", record.FAILED)
        if state == record.RUNNING and not live:
            state = record.FAILED          # its job ended (killed) before the trial could say
        elif state == record.PENDING and not live:
            state = record.MISSING         # queued for a rerun that never ran it
        out.append(TrialView(i, params, state, st.get("exit_code"), st.get("walltime_s"), st.get("start"),
                             st.get("end"), st.get("metrics"), st.get("attempt", 0), st.get("placement")))
    return out


def sweep_of(job, registry=None, refresh: bool = True) -> Optional[SweepView]:
    """The sweep ``job`` (a JobRecord) is a submission of, or None."""
    run_dir = record.run_dir_of(job.job_dir)
    rec = record.load(run_dir) if run_dir else None
    if rec is None:
        return None
    return view(run_dir, rec, registry, refresh)


def view(run_dir: Path, rec: record.SweepRecord, registry=None, refresh: bool = True) -> SweepView:
    from ..jobs.lifecycle import open_registry, refresh as do_refresh
    from ..schedulers import SchedulerError

    reg = open_registry(registry)
    jobs = []
    for job_id in rec.job_ids:
        try:
            j = reg.get(job_id, site=rec.site)
        except WmlError:
            j = None
        if j is None:
            continue
        if refresh and not j.state.final:
            try:
                j = do_refresh(j, reg)
            except (SchedulerError, WmlError):
                pass
        jobs.append(j)
    v = SweepView(run_dir, rec, jobs)
    v.trials = trial_views(run_dir, rec, v.live)
    return v


def find_run(text: str) -> SweepView:
    """A sweep by its run id (``wml jobs`` prints it), its directory, or one of its jobs."""
    p = Path(text)
    if (p / record.SWEEP_FILE).is_file():
        run_dir = p.resolve()
        return view(run_dir, record.require(run_dir))
    from ..jobs.lifecycle import find

    job = find(text)
    v = sweep_of(job)
    if v is None:
        raise WmlError(f"{text} is a job, not a sweep (wml sweep submits one)")
    return v


# -- wml sweep show ----------------------------------------------------------------------------
def cell(v) -> str:
    """A table cell: ``-`` for nothing, a float to 6 significant digits (the CLI's table, the
    report's summary and page alike)."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def typed(value):
    """A parameter as it was written: ``64`` an int, ``0.1`` a float, anything else as given
    (a params file's YAML values keep their own type); its ``{name}`` text is unchanged."""
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            return float(text)
    return value


def _sort_key(x):
    """Numbers by value, then text (as text); a missing value is placed by the caller."""
    if isinstance(x, bool):
        return (1, str(x))
    if isinstance(x, (int, float)):
        return (0, x)
    return (1, str(x))


FIXED_COLUMNS = ("trial", "state", "exit", "walltime_s")
SHADOWED = "metric:"     # a metric named like a parameter (or a fixed column) whose value differs from it


def _same(given, printed) -> bool:
    """Whether a trial's metric ``printed`` says what its parameter ``given`` (text from the grid,
    or a value from a YAML/CSV grid) says: ``0.5`` for ``lr=0.5``, ``2`` for ``bs=2.0``."""
    if isinstance(printed, bool) or isinstance(given, bool):
        return str(printed).lower() == str(given).lower()
    if isinstance(printed, (int, float)):
        try:
            return float(given) == float(printed)
        except (TypeError, ValueError):
            return False
    return str(printed) == str(given)


def rows(v: SweepView, sort: Optional[str] = None) -> List[dict]:
    """One row per trial: its parameters always as the trial was given them (typed: ``64`` an int),
    its state, and its metrics.  A metric named like a parameter (a script that prints its own
    ``lr``) adds nothing where it says the same; where it differs in any trial it gets a column of
    its own, ``metric:lr``.  ``sort``: by that metric or parameter, smallest first (``-name``:
    largest first); a trial without it comes last either way."""
    metric_names: List[str] = []
    for t in v.trials:
        for k in (t.metrics or {}):
            if k not in metric_names:
                metric_names.append(k)

    def fixed(t: TrialView) -> dict:
        return {"trial": t.index, **{k: typed(x) for k, x in t.params.items()}, "state": t.state,
                "exit": t.exit_code, "walltime_s": t.walltime_s}

    columns: Dict[str, str] = {}     # metric name -> its column
    for m in metric_names:
        if m not in FIXED_COLUMNS and not any(m in t.params for t in v.trials):
            columns[m] = m
        elif any(m in (t.metrics or {}) and not (m in fixed(t) and _same(fixed(t)[m], t.metrics[m]))
                 for t in v.trials):
            columns[m] = SHADOWED + m
    out = []
    for t in v.trials:
        row = fixed(t)
        for m, col in columns.items():
            row[col] = (t.metrics or {}).get(m)
        out.append(row)
    if sort is not None:
        name, reverse = sort, False
        if sort.startswith("-") and sort not in metric_names and not any(sort in r for r in out):
            name, reverse = sort[1:], True
        if name not in metric_names and not any(name in r for r in out):
            known = ", ".join(metric_names) or "none yet"
            raise WmlError(f"--sort {sort}: no trial printed that metric (metrics: {known}; -NAME sorts largest first)")
        have = [r for r in out if r.get(name) is not None]
        have.sort(key=lambda r: _sort_key(r[name]), reverse=reverse)
        out = have + [r for r in out if r.get(name) is None]
    return out


def render(v: SweepView, sort: Optional[str] = None, fmt: str = "table", tail: int = 5) -> str:
    table = rows(v, sort)
    if fmt == "json":
        return json.dumps({"run_id": v.rec.run_id, "run_dir": str(v.run_dir), "mode": v.rec.mode,
                           "state": v.state, "counts": v.counts, "trials": table}) + "\n"
    cols = list(table[0]) if table else ["trial"]
    for r in table[1:]:
        cols += [c for c in r if c not in cols]
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        for r in table:
            w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})
        return buf.getvalue()
    if fmt != "table":
        raise WmlError(f"--format {fmt}: expected table, csv or json")
    grid = [[c.upper() if c in ("trial", "state", "exit", "walltime_s") else c for c in cols]]
    grid += [[cell(r.get(c)) for c in cols] for r in table]
    widths = [max(len(row[i]) for row in grid) for i in range(len(cols))]
    text = f"sweep {v.rec.run_id} ({v.rec.mode}): {v.state}; {v.count_text()}\n"
    text += "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in grid) + "\n"
    for t in v.trials:
        if t.state == record.FAILED:
            lines = last_lines(v.run_dir, t.index, tail)
            text += f"\ntrial {t.index} failed (exit status {cell(t.exit_code)}); its last lines:\n"
            text += "".join(f"    {ln}\n" for ln in lines) if lines else "    (no output)\n"
    return text


#: ddlrun's echo of its launch line (``ddlrun: /path/mpiexec -n 2 ...``): every trial prints one
_LAUNCH_ECHO = re.compile(r"^ddlrun: \S*\b(mpiexec|mpirun|srun|jsrun|aprun)\s")


def last_lines(run_dir: Path, index: int, n: int) -> List[str]:
    """The trial's last ``n`` lines of output, without ddlrun's launch line."""
    try:
        with open(record.trial_dir(run_dir, index) / record.OUTPUT_FILE, "rb") as f:
            lines = f.read()[-65536:].decode(errors="replace").splitlines()
    except OSError:
        return []
    return [ln for ln in lines if not _LAUNCH_ECHO.match(ln)][-n:]


def status_lines(v: SweepView) -> List[str]:
    jobs = ", ".join(f"{j.job_id} {j.state.value}" for j in v.jobs) or "none recorded"
    out = [f"sweep {v.rec.run_id} ({v.rec.site}, {v.rec.mode}): {v.state}; {v.count_text()}",
           f"  {v.run_dir}; jobs: {jobs}"]
    for t in v.trials:
        params = " ".join(f"{k}={val}" for k, val in t.params.items())
        wall = f"{t.walltime_s:.1f}s" if t.walltime_s is not None else "-"
        out.append(f"  trial {t.index:<4} {t.state:<10} exit {cell(t.exit_code):<4} {wall:>8}  {params}")
    return out


def trial_logs(v: SweepView, index: int, follow: bool = False, out=None, poll_s: float = 0.5) -> int:
    """Trial ``index``'s output; ``follow``: until the trial has ended.  Returns 0."""
    import sys
    import time

    out = out or sys.stdout
    if not 0 <= index < v.rec.size:
        raise WmlError(f"--trial {index}: sweep {v.rec.run_id} has trials 0..{v.rec.size - 1}")
    path = record.trial_dir(v.run_dir, index) / record.OUTPUT_FILE
    pos = 0
    while True:
        try:
            with open(path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
            out.write(chunk.decode(errors="replace"))
            out.flush()
        except FileNotFoundError:
            if not follow:
                st = v.trials[index].state
                out.write(f"trial {index} has no output yet ({st})\n")
                return 0
        if not follow:
            return 0
        st = record.read_state(v.run_dir, index) or {}
        if st.get("state") in (record.COMPLETED, record.FAILED, record.TIMEOUT, record.CANCELLED):
            follow = False          # one last read
            continue
        fresh = view(v.run_dir, v.rec)
        if not fresh.live:
            follow = False
            continue
        time.sleep(poll_s)
