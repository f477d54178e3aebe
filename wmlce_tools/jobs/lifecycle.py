"""A submitted job's life after ``wml submit``: record it, ask its scheduler how it is doing,
wait for it, cancel it, show its output.

Every scheduler is asked through its module in ``wmlce_tools.schedulers`` (status queries in
order, cancel command, the files it leaves behind); this module only runs those commands,
bounded in time, and keeps the registry (``registry.py``) up to date.

- ``record_submission(result, plan)``: the registry entry for a job ``submit`` just submitted
  (a local-site job is recorded RUNNING as it starts, ``record_local_start``, and its end by
  the wml process that runs it, ``record_local_end``).
- ``refresh(record)``: the job's state now, recorded in the registry.
- ``wait_for(record, out)``: polls with backoff (0.5 s growing to 10 s), shows a live line
  ``job 123 RUNNING 00:42`` on a terminal and plain lines otherwise (at least one a minute),
  returns the job's exit code; Ctrl-C stops waiting, leaves the job running and says so.
- ``cancel(record)``: asks the scheduler to end the job and waits (bounded) to see it end.
- ``logs(record, follow)``: the job's output files; ``follow`` streams them until the job ends.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, TextIO, Tuple

from ..atomic import write_text_atomic
from ..errors import WmlError
from ..quoting import sh_join
from ..runstats.endline import REF_FILE
from ..schedulers import (CANCEL_FINISHED, CANCEL_MARK, CANCEL_REQUESTED, CANCEL_UNKNOWN, NEVER_STARTS, SchedulerError,
                          get_scheduler, tool_failure)
from .registry import JobRecord, Registry
from ..schedulers.states import JobState

STATUS_TIMEOUT_S = 60.0        # one squeue/bjobs/qstat call (squeue alone retries ~18 s when slurmctld is down)
CANCEL_TIMEOUT_S = 60.0
CANCEL_SETTLE_S = 20.0         # how long `cancel` watches for the job to end
POLL_FIRST_S, POLL_MAX_S, POLL_GROWTH = 0.5, 10.0, 1.5
PLAIN_PROGRESS_EVERY_S = 60.0  # without a terminal: a line at least this often


@dataclass(frozen=True)
class Observation:
    """What the scheduler (or the job's files) said: ``known`` is False when nothing knows
    the job any more (finished and forgotten, or never existed)."""

    state: JobState
    exit_code: Optional[int]
    known: bool
    source: str
    detail: str = ""          # the scheduler's reason, when it gave one


# -- registry ----------------------------------------------------------------------------

def open_registry(registry: Optional[Registry] = None) -> Registry:
    return registry if registry is not None else Registry()


def record_submission(result, plan=None, registry: Optional[Registry] = None) -> JobRecord:
    """Add the job ``submit`` returned (a ``SubmitResult``) to the registry.

    A local-site job was recorded when it started (``record_local_start``) and has ended:
    its record is returned.  Jobs given to a scheduler start PENDING."""
    reg = open_registry(registry)
    if result.scheduler == "local" and result.record_id is not None:
        return reg.get(int(result.record_id))
    state, code = JobState.PENDING, None
    if result.scheduler == "local":     # ran without a record (the registry was not usable then)
        code = result.exit_code if result.exit_code is not None else 0
        state = JobState.parse(result.state) if result.state else (
            JobState.COMPLETED if code == 0 else JobState.FAILED)
    return note_ref(reg.add(_new_record(result, plan, state, code)))


def note_ref(rec: JobRecord) -> JobRecord:
    """Leave the job's registry id in its directory (``@N``), so that the line ddlrun prints at the
    job's end names the command that reports it (runstats/endline.py).  Best effort."""
    if rec.job_dir and rec.id is not None:
        try:
            write_text_atomic(Path(rec.job_dir) / REF_FILE, f"@{rec.id}\n")
        except OSError:
            pass
    return rec


def _new_record(result, plan, state: JobState, code: Optional[int]) -> JobRecord:
    name = plan.request.job_name if plan is not None else Path(str(result.jobdir)).name
    return JobRecord(site=result.site, scheduler=result.scheduler, job_id=str(result.job_id), name=name,
                     job_dir=str(result.jobdir), script=str(result.script), output=str(result.output),
                     error=str(result.error), submit_command=result.submit_command, state=state, exit_code=code)


def wml_command() -> str:
    """How another shell runs this ``wml``: ``wml`` where it is on the system's PATH; from a
    virtual environment (which another shell may not have activated), its script's full path;
    else this interpreter with ``-m wmlce_tools``."""
    script = Path(sys.executable).parent / "wml"
    if sys.prefix == sys.base_prefix and shutil.which("wml") == str(script):
        return "wml"
    if script.is_file() and os.access(script, os.X_OK):
        return sh_join([str(script)])
    return sh_join([sys.executable, "-m", "wmlce_tools"])


def record_local_start(result, plan, registry: Optional[Registry] = None,
                       err: TextIO = sys.stderr) -> Optional[JobRecord]:
    """A local-site job about to run: recorded RUNNING (submitted now), its ID said on ``err``
    with how to follow it.  None, with a warning, when the registry cannot take it: the job
    runs all the same."""
    try:
        rec = note_ref(open_registry(registry).add(_new_record(result, plan, JobState.RUNNING, None)))
    except WmlError as e:
        err.write(f"wml: warning: job {result.job_id} is not recorded ({e}); it runs all the same\n")
        return None
    seg = plan.segment if plan is not None else None
    what = f"run {seg.chain.run_id}, segment {seg.index} of {seg.chain.length}: job" if seg is not None else "job"
    wml = wml_command()
    err.write(f"wml: {what} {result.job_id} (@{rec.id} in wml jobs) running on this machine; from another "
              f"shell: {wml} status @{rec.id}, {wml} logs -f @{rec.id}, {wml} cancel @{rec.id}\n")
    err.flush()
    return rec


def record_local_end(record: JobRecord, end, registry: Optional[Registry] = None) -> str:
    """Record how a local job ended (a ``LocalEnd``); returns its state's name."""
    state = (JobState.TIMEOUT if end.timed_out else JobState.CANCELLED if end.cancelled
             else JobState.COMPLETED if end.exit_code == 0 else JobState.FAILED)
    try:
        open_registry(registry).update_state(record, state, end.exit_code)
    except WmlError as e:
        sys.stderr.write(f"wml: warning: could not record how job {record.job_id} ended ({e})\n")
    return state.value


def find(ref: str, registry: Optional[Registry] = None, err: TextIO = sys.stderr) -> JobRecord:
    """The registered job a user means by ``ref`` (``Registry.resolve``: the scheduler's id,
    ``@N`` / ``id:N`` for the ID column, ``job:X``, a run id); WmlError if none.  When the id
    was given to more than one job, a line on ``err`` names the others."""
    rec, note = open_registry(registry).resolve(ref)
    if note:
        err.write(f"wml: {note}\n")
    return rec


# -- asking the scheduler ------------------------------------------------------------------

def _run_tool(sched, argv: List[str], timeout: float, retry_busy: bool = True) -> subprocess.CompletedProcess:
    """The scheduler's one command path (schedulers/commands.py): an unreachable server is
    reported in seconds; a query that comes back "busy" is asked again within ``timeout``."""
    return sched.run_command(argv, wait_s=timeout, retry_busy=retry_busy)


def _check_tools(sched, tools) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise WmlError(f"{missing[0]} not found: {sched.missing_hint}")


def _cancel_requested(record: JobRecord) -> bool:
    return bool(record.job_dir) and (Path(record.job_dir) / CANCEL_MARK).exists()


def observe(record: JobRecord) -> Observation:
    """Ask the job's scheduler (its queries in order), then the job's own files."""
    if record.scheduler == "local":    # the wml process running it records its end
        from ..schedulers.local_run import runner_gone

        now = open_registry().get(record.id) if record.id is not None else record
        if not now.state.final and now.job_dir and runner_gone(Path(now.job_dir)):
            return Observation(JobState.UNKNOWN, None, True, "registry",
                               "the wml process that ran it has ended without recording how the job ended")
        return Observation(now.state, now.exit_code, True, "registry")
    sched = get_scheduler(record.scheduler)
    queries = sched.status_queries(record.job_id)
    _check_tools(sched, [queries[0].argv[0]] if queries else [])
    got, source = None, ""
    for q in queries:
        if shutil.which(q.argv[0]) is None:
            continue
        proc = _run_tool(sched, q.argv, STATUS_TIMEOUT_S)
        got = q.parse(proc.stdout, proc.stderr, proc.returncode)   # SchedulerError: stop here
        if got is not None:
            source = " ".join(q.argv[:2])
            break
    if got is None:
        got = sched.status_from_files(record.output, record.error, Path(record.job_dir) if record.job_dir else None,
                                      record.job_id)
        source = "the job's files"
    if got is None:
        return Observation(JobState.UNKNOWN, None, False, "")
    state, code = got[0], got[1]
    detail = got[2] if len(got) > 2 else ""
    if _cancel_requested(record) and state == JobState.FAILED:
        state = JobState.CANCELLED       # LSF and Cobalt report a killed job as a failure
    return Observation(state, code, True, source, detail)


def refresh(record: JobRecord, registry: Optional[Registry] = None) -> JobRecord:
    """The job's state now, written to the registry when it changed.  A job already recorded
    as ended is not asked about again."""
    return refresh_detail(record, registry)[0]


def refresh_detail(record: JobRecord, registry: Optional[Registry] = None) -> Tuple[JobRecord, str]:
    """``refresh``, plus the scheduler's reason word for a waiting job ('' when none)."""
    if record.state.final:
        return record, ""
    obs = observe(record)
    if obs.state == record.state and (obs.exit_code is None or obs.exit_code == record.exit_code):
        return record, obs.detail
    return open_registry(registry).update_state(record, obs.state, obs.exit_code), obs.detail


def exit_code_of(record: JobRecord) -> int:
    """The exit status ``wml submit --wait`` ends with: the job's own when known; a job that
    did not complete never gives 0."""
    if record.state == JobState.COMPLETED:
        return record.exit_code or 0
    if record.exit_code:
        return record.exit_code
    return 1


# -- waiting -------------------------------------------------------------------------------

def _clock(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _status_line(record: JobRecord, elapsed: float) -> str:
    return f"job {record.job_id} {record.state.value} {_clock(elapsed)}"


class _Progress:
    """The live line on a terminal (rich), plain lines otherwise."""

    def __init__(self, out: TextIO):
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)()) and os.environ.get("TERM") != "dumb"
        self._status = None
        self._last_text = ""
        self._last_plain = 0.0
        if self.tty:
            from rich.console import Console

            self._status = Console(file=out, highlight=False).status("", spinner="dots")
            self._status.start()

    def show(self, text: str, changed: bool) -> None:
        if self._status is not None:
            self._status.update(text)
            return
        now = time.monotonic()
        if changed or now - self._last_plain >= PLAIN_PROGRESS_EVERY_S:
            self.out.write(f"wml: {text}\n")
            self.out.flush()
            self._last_plain = now

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def wait_for(record: JobRecord, out: TextIO = sys.stderr, timeout: Optional[float] = None,
             registry: Optional[Registry] = None, *, sleep: Callable[[float], None] = time.sleep) -> int:
    """Wait until the job ends; returns its exit code (see ``exit_code_of``).

    Polls with backoff (0.5 s growing to 10 s); the line shows the state and the time waited,
    updated every second on a terminal.  ``timeout`` (seconds) bounds the wait: WmlError
    (exit 124) when the job is still not done, the job left running.  Ctrl-C: WmlError (exit
    130) saying the job is still running and how to follow or cancel it."""
    reg = open_registry(registry)
    start = time.monotonic()
    delay = POLL_FIRST_S
    progress = _Progress(out)
    last_state = None
    try:
        while True:
            obs_failed = None
            try:
                if not record.state.final:
                    obs = observe(record)
                    if not obs.known:
                        raise WmlError(
                            f"job {record.job_id}: {record.scheduler} no longer knows it and it left no record of how it "
                            f"ended; its output: {record.output}")
                    if obs.detail in NEVER_STARTS:
                        raise WmlError(f"job {record.job_id} can never start: {NEVER_STARTS[obs.detail]} "
                                       f"({record.scheduler}: {obs.detail}); it stays queued until you "
                                       f"wml cancel {record.job_id}")
                    if obs.state != record.state or (obs.exit_code is not None and obs.exit_code != record.exit_code):
                        record = reg.update_state(record, obs.state, obs.exit_code)
            except SchedulerError as e:
                obs_failed = str(e)       # a passing hiccup: say so and keep polling
            elapsed = time.monotonic() - start
            if record.state.final:
                progress.stop()
                code = exit_code_of(record)
                tail = f" with exit code {record.exit_code}" if record.exit_code is not None else ""
                out.write(f"wml: job {record.job_id} {record.state.value}{tail} after {_clock(elapsed)}; "
                          f"output: {record.output}\n")
                out.flush()
                return code
            text = _status_line(record, elapsed)
            if obs_failed:
                text += f" (could not ask the scheduler: {obs_failed}; retrying)"
            progress.show(text, changed=record.state != last_state or bool(obs_failed))
            last_state = record.state
            if timeout is not None and elapsed >= timeout:
                raise WmlError(f"gave up waiting after {_clock(elapsed)}: job {record.job_id} is still "
                               f"{record.state.value}; it keeps running (wml status {record.job_id}, "
                               f"wml cancel {record.job_id})", exit_code=124)
            # sleep until the next poll, redrawing the clock every second
            wake = time.monotonic() + (delay if timeout is None else min(delay, max(0.05, timeout - elapsed)))
            while True:
                left = wake - time.monotonic()
                if left <= 0:
                    break
                sleep(min(1.0, left))
                if progress.tty:
                    progress.show(_status_line(record, time.monotonic() - start), changed=False)
            delay = min(delay * POLL_GROWTH, POLL_MAX_S)
    except KeyboardInterrupt:
        progress.stop()
        raise WmlError(f"stopped waiting; job {record.job_id} is still {record.state.value} on {record.site} and keeps "
                       f"running (wml status {record.job_id}, wml logs -f {record.job_id}, wml cancel {record.job_id})",
                       exit_code=130) from None
    finally:
        progress.stop()


# -- cancelling ----------------------------------------------------------------------------

def cancel(record: JobRecord, registry: Optional[Registry] = None, *,
           settle: float = CANCEL_SETTLE_S) -> Tuple[JobRecord, str]:
    """Ask the scheduler to end the job; returns (the record afterwards, outcome), outcome one
    of CANCEL_REQUESTED / CANCEL_FINISHED / CANCEL_UNKNOWN.  Watches up to ``settle``
    seconds for the job to end, so ``wml status`` right after says CANCELLED."""
    reg = open_registry(registry)
    if record.state.final:
        return record, CANCEL_FINISHED
    if record.scheduler == "local":   # the wml process running it sees the mark and ends it
        outcome = CANCEL_REQUESTED
    else:
        sched = get_scheduler(record.scheduler)
        argv = sched.cancel_argv(record.job_id)
        _check_tools(sched, [argv[0]])
        proc = _run_tool(sched, argv, CANCEL_TIMEOUT_S, retry_busy=False)
        outcome = sched.parse_cancel(proc.stdout, proc.stderr, proc.returncode)
    if outcome == CANCEL_REQUESTED and record.job_dir:
        try:
            (Path(record.job_dir) / CANCEL_MARK).write_text(f"{time.time()}\n")
        except OSError:
            pass   # the job directory may be gone; the scheduler's own state still tells
    deadline = time.monotonic() + settle
    delay = 0.2
    while True:
        obs = observe(record)
        if not obs.known:
            if outcome == CANCEL_REQUESTED and _cancel_requested(record):
                record = reg.update_state(record, JobState.CANCELLED, None)
            elif record.state != JobState.UNKNOWN:
                record = reg.update_state(record, JobState.UNKNOWN, None)
            return record, outcome
        if obs.state != record.state or (obs.exit_code is not None and obs.exit_code != record.exit_code):
            record = reg.update_state(record, obs.state, obs.exit_code)
        if record.state.final or outcome != CANCEL_REQUESTED or time.monotonic() >= deadline:
            return record, outcome
        time.sleep(delay)
        delay = min(delay * 1.5, 2.0)


# -- output --------------------------------------------------------------------------------

def output_files(record: JobRecord) -> List[Path]:
    paths = [Path(record.output)] if record.output else []
    if record.error and record.error != record.output:
        paths.append(Path(record.error))
    return paths


def logs(record: JobRecord, follow: bool = False, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
         registry: Optional[Registry] = None, *, poll_max: float = 5.0) -> int:
    """Write the job's output files to ``out`` (a ``==> path <==`` header before each when
    there are two).  ``follow``: keep writing what they gain until the job ends (its state
    is checked every few seconds), then return.  Returns 0."""
    paths = output_files(record)
    if not paths:
        raise WmlError(f"job {record.job_id} has no output file recorded")
    show_headers = len(paths) > 1
    offsets = {p: 0 for p in paths}
    announced = set()
    ends_line = [True]        # did the last text written end a line?
    current = [None]          # the file whose text was written last (tail -f style headers)

    def drain() -> bool:
        wrote = False
        for p in paths:
            try:
                size = p.stat().st_size
            except OSError:
                continue
            if size < offsets[p]:      # truncated or rewritten: start again
                offsets[p] = 0
            if size == offsets[p] and p in announced:
                continue
            with open(p, "rb") as f:
                f.seek(offsets[p])
                data = f.read()
            offsets[p] += len(data)
            if show_headers and current[0] != p and (data or p not in announced):
                out.write(("" if ends_line[0] else "\n") + f"==> {p} <==\n")
                ends_line[0] = True
                current[0] = p
            announced.add(p)
            if data:
                out.write(data.decode(errors="replace"))
                ends_line[0] = data.endswith(b"\n")
                wrote = True
        out.flush()
        return wrote

    if not follow:
        if not any(p.exists() for p in paths):
            state = record.state.value
            raise WmlError(f"job {record.job_id} ({state}) has no output yet; it will be in {paths[0]}")
        drain()
        if not ends_line[0]:
            out.write("\n")
        return 0
    rec = record
    check_every, last_check = POLL_FIRST_S, time.monotonic()
    try:
        if not any(p.exists() for p in paths):
            err.write(f"wml: job {rec.job_id} is {rec.state.value}; waiting for {paths[0]} (Ctrl-C stops)\n")
            err.flush()
        while True:
            wrote = drain()
            if rec.state.final or time.monotonic() - last_check >= check_every:
                last_check = time.monotonic()
                check_every = min(check_every * POLL_GROWTH, poll_max)
                if not rec.state.final:
                    try:
                        obs = observe(rec)
                    except SchedulerError as e:
                        err.write(f"wml: could not ask the scheduler ({e}); still following\n")
                    else:
                        if not obs.known:
                            drain()
                            err.write(f"wml: {rec.scheduler} no longer knows job {rec.job_id}; stopped following\n")
                            return 0
                        if obs.state != rec.state or (obs.exit_code is not None and obs.exit_code != rec.exit_code):
                            rec = open_registry(registry).update_state(rec, obs.state, obs.exit_code)
                if rec.state.final:
                    time.sleep(0.5)            # the job's last lines may still be on their way
                    drain()
                    code = f" with exit code {rec.exit_code}" if rec.exit_code is not None else ""
                    err.write(f"wml: job {rec.job_id} {rec.state.value}{code}\n")
                    err.flush()
                    return 0
            time.sleep(0.1 if wrote else 0.3)
    except KeyboardInterrupt:
        err.write(f"\nwml: stopped following; job {rec.job_id} keeps running ({rec.state.value})\n")
        return 130


__all__ = ["Observation", "record_submission", "find", "observe", "refresh", "wait_for", "cancel", "logs",
           "exit_code_of", "output_files", "tool_failure", "CANCEL_REQUESTED", "CANCEL_FINISHED", "CANCEL_UNKNOWN"]
