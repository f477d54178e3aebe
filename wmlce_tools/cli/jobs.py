"""``wml jobs``, ``wml status JOB``, ``wml cancel JOB``, ``wml logs JOB [-f]``.

The command functions take typer-annotated parameters, so the main app registers them as
they are (``register(app)`` does exactly that)::

    from .jobs import register as register_job_commands
    register_job_commands(app)

JOB is the scheduler's job id (what ``wml submit`` printed, what sbatch/bsub/qsub said), the ID
column of ``wml jobs`` (``@N``: a form no scheduler's id takes), or a run id
(``wml-job-20261126-091855``, what ``wml submit --chain`` and ``wml jobs`` print).
"""

import json
import sys
import time
from typing import List, Optional

import typer
from typing_extensions import Annotated

from ..errors import WmlError

Job = Annotated[str, typer.Argument(help="Job: the id wml submit printed (the scheduler's), the ID column of `wml jobs` (@N), or a run id (wml-job-YYYYMMDD-HHMMSS).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _fmt_time(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) if t else "-"


def _or_dash(v) -> str:
    return "-" if v is None else str(v)


def _table(rows: List[List[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows) + "\n"


def jobs_cmd(as_json: AsJson = False,
             all_jobs: Annotated[bool, typer.Option("--all", "-a", help="Every job, not only the last 50.")] = False,
             site: Annotated[Optional[str], typer.Option("--site", "-s", help="Only this site's jobs.")] = None,
             refresh: Annotated[bool, typer.Option("--refresh/--no-refresh",
                                                   help="Ask the schedulers about jobs not yet ended (default).")] = True) -> None:
    """List the jobs wml submitted (newest first) with their last known state."""
    from ..jobs.lifecycle import refresh as do_refresh
    from ..jobs.registry import Registry
    from ..schedulers import SchedulerError

    reg = Registry()
    records = reg.list(limit=None if all_jobs else 50, site=site)
    if refresh:
        unreachable = {}
        for i, rec in enumerate(records):
            if rec.state.final or rec.scheduler in unreachable:
                continue
            try:
                records[i] = do_refresh(rec, reg)
            except (SchedulerError, WmlError) as e:   # scheduler down or its tools not here
                unreachable[rec.scheduler] = str(e)
        for sched, msg in unreachable.items():
            sys.stderr.write(f"wml: {sched} jobs show their last known state: {msg}\n")
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in records], indent=None))
        return
    if not records:
        typer.echo("no jobs yet (wml submit records them here)")
        return
    from ..runs.chain_view import chain_of
    from ..runs.sweep_view import sweep_of

    # a chain's STEP: the step its ranks reached; CKPT: the last checkpoint's step (where it resumes)
    rows = [["ID", "JOB", "SITE", "NAME", "STATE", "EXIT", "STEP", "CKPT", "SUBMITTED (UTC)", "OUTPUT"]]
    shown_runs = set()
    for r in records:
        sweep = sweep_of(r, reg, refresh=False)    # a sweep's submission: the sweep, one line with counts
        if sweep is not None:
            if sweep.rec.run_id in shown_runs:
                continue
            shown_runs.add(sweep.rec.run_id)
            rows.append(["sweep", sweep.rec.run_id, r.site, f"{r.name} ({sweep.rec.size} trial{'s' if sweep.rec.size != 1 else ''}, {sweep.rec.mode})",
                         f"{sweep.state}: {sweep.count_text()}", "-", "-", "-", _fmt_time(min(j.submitted_at for j in sweep.jobs)
                                                                                      if sweep.jobs else r.submitted_at),
                         str(sweep.run_dir)])
            continue
        view = chain_of(r, reg, refresh=False)     # a segment of a chained run: the run, then its segments
        if view is None:
            rows.append([f"@{r.id}", r.job_id, r.site, r.name, r.state.value,
                         "-" if r.exit_code is None else str(r.exit_code), "-", "-", _fmt_time(r.submitted_at), r.output])
            continue
        if view.rec.run_id in shown_runs:
            continue
        shown_runs.add(view.rec.run_id)
        rows.append(["run", view.rec.run_id, r.site, r.name, view.state, "-", _or_dash(view.reached),
                     _or_dash(view.step), _fmt_time(min((s.job.submitted_at for s in view.segments if s.job), default=None)),
                     str(view.run_dir)])
        for s in view.segments:
            j = s.job
            rows.append([f"@{j.id}" if j else "-", f"  {s.index}/{view.rec.length} {j.job_id if j else '-'}", r.site,
                         r.name, s.state, "-" if j is None or j.exit_code is None else str(j.exit_code),
                         _or_dash(s.reached), _or_dash(s.step), _fmt_time(j.submitted_at) if j else "-",
                         j.output if j else "-"])
    sys.stdout.write(_table(rows))


def status_cmd(job: Job, as_json: AsJson = False) -> None:
    """The job's state now (asks its scheduler: squeue/scontrol/sacct, bjobs, qstat)."""
    from ..jobs.lifecycle import find, refresh_detail
    from ..jobs.registry import Registry
    from ..runs.chain_view import chain_of
    from ..schedulers import NEVER_STARTS, SchedulerError

    rec = find(job)
    from ..runs.sweep_view import status_lines, sweep_of

    sweep = sweep_of(rec, Registry())
    if sweep is not None:      # a sweep: each trial (parameters, state, exit status, walltime)
        if as_json:
            typer.echo(json.dumps({"run_id": sweep.rec.run_id, "run_dir": str(sweep.run_dir), "mode": sweep.rec.mode,
                                   "state": sweep.state, "counts": sweep.counts,
                                   "jobs": [{"job_id": j.job_id, "state": j.state.value} for j in sweep.jobs],
                                   "trials": [t.as_dict() for t in sweep.trials]}))
        else:
            typer.echo("\n".join(status_lines(sweep)))
        return
    view = chain_of(rec, Registry())
    if view is not None:       # a chained run: the run and each segment (id, state, step)
        if as_json:
            # "step" is the last checkpoint's (as before "step_reached" came beside it)
            typer.echo(json.dumps({"run_id": view.rec.run_id, "state": view.state, "step": view.step,
                                   "last_checkpoint": view.step, "step_reached": view.reached,
                                   "finished": view.finished, "run_dir": str(view.run_dir),
                                   "checkpoint_dir": view.rec.checkpoint_dir,
                                   "segments": [{"segment": s.index, "job_id": s.job.job_id if s.job else None,
                                                 "state": s.state, "exit_code": s.job.exit_code if s.job else None,
                                                 "step": s.step, "last_checkpoint": s.step,
                                                 "step_reached": s.reached} for s in view.segments]}))
        else:
            typer.echo("\n".join(view.lines()))
            _report_line(next((e.job_dir for e in reversed(view.rec.segments)
                               if e.job_id and _has_stats(e.job_dir)), ""))
        return
    try:
        rec, reason = refresh_detail(rec)
    except SchedulerError as e:
        raise WmlError(f"cannot get the state of job {rec.job_id} from {rec.scheduler}: {e}") from None
    if as_json:
        typer.echo(json.dumps({**rec.as_dict(), "reason": reason or None}))
        return
    code = f" (exit code {rec.exit_code})" if rec.exit_code is not None else ""
    why = f" ({reason}: {NEVER_STARTS[reason]}; it can never start)" if reason in NEVER_STARTS else (
        f" ({reason})" if reason else "")
    typer.echo(f"job {rec.job_id} ({rec.name}, {rec.site}): {rec.state.value}{code}{why}")
    typer.echo(f"  submitted {_fmt_time(rec.submitted_at)} UTC; script {rec.script}")
    typer.echo(f"  output {rec.output}" + (f"; error {rec.error}" if rec.error and rec.error != rec.output else ""))
    _report_line(rec.job_dir)


def _has_stats(job_dir: str) -> bool:
    from ..runstats.records import STATS_DIR
    from pathlib import Path

    return bool(job_dir) and (Path(job_dir) / STATS_DIR).is_dir()


def _report_line(job_dir: str) -> None:
    """The run in one line, from its ranks' records (wml report)."""
    from ..runstats.endline import status_line

    line = status_line(job_dir)
    if line:
        typer.echo(f"  run: {line}")
    from ..runstats.attempts import status_line as attempts_line

    line = attempts_line(job_dir)
    if line:
        typer.echo(f"  attempts: {line}")


def cancel_cmd(job: Job) -> None:
    """Ask the scheduler to end the job (scancel, bkill, qdel) and report how it ended."""
    from ..jobs.lifecycle import CANCEL_FINISHED, CANCEL_UNKNOWN, cancel, find
    from ..schedulers import SchedulerError

    from ..jobs.registry import Registry

    both = Registry().ambiguous(job)
    if both:
        named = "; ".join(f"{r.site} job {r.job_id} ({r.state.value}, @{r.id})" for r in both)
        raise WmlError(f"{job} could mean {len(both)} jobs: {named}; say which: wml cancel @N")
    rec = find(job)
    from ..runs.sweep_view import sweep_of

    sweep = sweep_of(rec)
    if sweep is not None:      # a sweep: its array or its packed allocation, every submission still live
        live = [j for j in sweep.jobs if not j.state.final]
        if not live:
            typer.echo(f"sweep {sweep.rec.run_id} has already ended: {sweep.state}")
            return
        for j in live:
            try:
                j, _ = cancel(j)
            except SchedulerError as e:
                raise WmlError(f"cannot cancel job {j.job_id} of sweep {sweep.rec.run_id} on {j.scheduler}: {e}") from None
            typer.echo(f"sweep {sweep.rec.run_id}: job {j.job_id} {j.state.value if j.state.final else 'cancel requested'}")
        return
    if rec.state.final:
        typer.echo(f"job {rec.job_id} has already ended: {rec.state.value}")
        return
    try:
        rec, outcome = cancel(rec)
    except SchedulerError as e:
        raise WmlError(f"cannot cancel job {rec.job_id} on {rec.scheduler}: {e}") from None
    if outcome == CANCEL_UNKNOWN and rec.state == rec.state.UNKNOWN:
        raise WmlError(f"{rec.scheduler} does not know job {rec.job_id} (it may have ended long ago)")
    if outcome == CANCEL_FINISHED:
        typer.echo(f"job {rec.job_id} had already ended: {rec.state.value}")
    elif rec.state.final:
        typer.echo(f"job {rec.job_id} {rec.state.value}")
    else:
        typer.echo(f"cancel requested; job {rec.job_id} is still {rec.state.value} (the scheduler ends it shortly)")


def logs_cmd(job: Job,
             follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep showing new output until the job ends.")] = False,
             trial: Annotated[Optional[int], typer.Option("--trial", help="A sweep's trial: its output (trials/N/output.log).")] = None) -> None:
    """The job's output (and error) file; -f follows it until the job ends.  A job of a
    chain (--chain N): every segment's output in order; -f follows the run to its end.
    A sweep: --trial N shows that trial's output (without it, the sweep's job output)."""
    from ..jobs.lifecycle import find, logs
    from ..jobs.registry import Registry
    from .chain import chain_logs
    from ..runs.chain_view import chain_of

    rec = find(job)
    if trial is not None:
        from ..runs.sweep_view import sweep_of, trial_logs

        sweep = sweep_of(rec)
        if sweep is None:
            raise WmlError(f"--trial goes with a sweep; {job} is a plain job")
        code = trial_logs(sweep, trial, follow)
        if code:
            raise typer.Exit(code)
        return
    view = chain_of(rec, Registry())
    code = chain_logs(view, follow) if view is not None else logs(rec, follow=follow)
    if code:
        raise typer.Exit(code)


def wait_after_submit(result, plan, wait: bool, out=None) -> Optional[int]:
    """What ``wml submit`` calls once the job is submitted: record it and, with ``--wait``,
    wait for it.  Returns the exit code ``submit`` should end with (None: 0)."""
    from ..jobs.lifecycle import record_submission, wait_for

    try:
        rec = record_submission(result, plan)
    except WmlError as e:
        raise WmlError(f"job {result.job_id} was submitted but could not be recorded ({e}); "
                       f"its output will be in {result.output}") from None
    if wait and not rec.state.final:
        return wait_for(rec, out=out or sys.stderr)
    return rec.exit_code or None


def register(app: typer.Typer) -> None:
    """Add ``jobs``, ``status``, ``cancel`` and ``logs`` to the main ``wml`` app."""
    app.command("jobs")(jobs_cmd)
    app.command("status")(status_cmd)
    app.command("cancel")(cancel_cmd)
    app.command("logs")(logs_cmd)
