"""wml from Python: submit a script or a function, run a sweep, map a function over a list.

    from wmlce_tools import submit, map
    job = submit(train, 0.1, nodes=2, ranks_per_node=1, walltime="30")
    job.state(); job.wait(); job.result(); job.logs(); job.cancel()
    results = map(train, [0.1, 0.01, 0.001], max_running=2)

The keyword options are ``wml submit``'s (``site``, ``nodes``, ``ranks_per_node``,
``gpus_per_rank``, ``walltime``, ``project``, ``env``, ``export``...), spelled with underscores.
A function travels with cloudpickle: it, its arguments and its return value must pickle.  It
runs on every rank of its job (a distributed run); rank 0's return value is ``result()``; an
exception on rank 0 is raised again here, with the remote traceback as its cause.  A function
call is a sweep of one trial (``map``: one trial per item), so ``wml jobs/status/logs`` and
``wml sweep show`` see it; each trial's result is ``trials/<i>/result.pkl`` in the run's
directory.  The ``wml sweep`` command is built on :func:`sweep` and :func:`resume` here.

The API layer, above `options` (`wmlce_tools.submit`, `map`, `sweep`, `resume` are these, imported on
first use by `wmlce_tools/__init__.py`); `remote.py` runs a sent call on every rank
(`python -m wmlce_tools.api.remote`).  May import `options`, `runs`, `jobs` and everything
below; never `cli`.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, List, Optional, Sequence, Union

from ..errors import WmlError

POLL_S = 0.5
CALLS_FILE = "calls.pkl"


class RemoteTraceback(Exception):
    """The cause of an exception raised again from a remote function: its traceback there."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


class RemoteError(WmlError):
    """A remote function's exception that could not be unpickled here, or a trial that ended
    without a result (its job failed, was cancelled, or a rank other than 0 failed)."""


_CALL_OPTIONS = ("max_running", "pack", "out", "opts", "account", "dry_run", "timeout")


def _api_errors(func):
    """A WmlError from a Python call says options as Python spells them (``nodes=``, not
    ``--nodes``)."""
    import functools
    import re

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except RemoteError:
            raise
        except WmlError as e:
            from ..options import JobOptions

            names = [f.name for f in dataclasses.fields(JobOptions)] + ["max_running", "pack"]
            text = str(e)
            for name in sorted(names, key=len, reverse=True):
                # "--pack NODES" -> "pack=NODES", "--nodes must be" -> "nodes must be"
                text = re.sub(rf"(?<![\w-])--{name.replace('_', '-')}(?![\w-])( (?=[A-Z0-9'\"]))?",
                              lambda m, n=name: f"{n}=" if m.group(1) else n, text)
            raise WmlError(text) from None
    return call


def _check_options(options: dict, fn_call: bool) -> None:
    from ..options import JobOptions

    import difflib

    names = [f.name for f in dataclasses.fields(JobOptions)] + list(_CALL_OPTIONS)
    for key in options:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            own = (f" (the function's own keyword arguments go in kwargs=: submit(f, ..., kwargs={{{key!r}: ...}}))"
                   if fn_call else "")
            raise WmlError(f"unknown job option {key!r}{hint}{own}")


# -- the request ----------------------------------------------------------------------------
def job_options(opts=None, **options):
    """The one JobOptions (``wml submit``'s options, ``wmlce_tools.options``): ``opts`` as given,
    else built from keyword options (an unknown name is one WmlError naming the closest)."""
    from ..options import JobOptions

    if opts is not None and options:
        raise WmlError(f"give the job options either as opts= or as keywords, not both ({', '.join(options)})")
    return opts if opts is not None else JobOptions.of(**options)


def request(opts):
    """(SiteProfile, ResourceRequest) of a JobOptions, everything checked."""
    from ..options import request_from
    from ..site.registry import choose_site

    if opts.chain is not None or opts.checkpoint_dir is not None or opts.signal_margin is not None:
        raise WmlError("--chain, --checkpoint-dir and --signal-margin do not go with a sweep (each trial is one job)")
    from ..walltime import check_two_part

    site = choose_site(opts.site)
    check_two_part(opts.walltime, site.scheduler, site.name)
    req, _ = request_from(opts)
    return site, req


def _base_dir() -> Path:
    return Path(os.environ.get("WML_JOBS_DIR") or Path.cwd() / "wml-jobs").absolute()


# -- sweeps ---------------------------------------------------------------------------------
def plan(program: Sequence[str], trials, *, max_running: Optional[int] = None, pack: Optional[int] = None,
         preview: bool = False, run_dir: Optional[Path] = None, opts=None, **options):
    """The checked SweepPlan of ``program`` over ``trials`` (nothing written)."""
    from ..runs.sweep_plan import SweepOptions, plan_sweep
    from ..runs.sweep_submit import new_run_dir

    sweep_opts = SweepOptions(max_running=max_running, pack=pack)   # checked before the site
    profile, req = request(job_options(opts, **options))
    run_dir = run_dir or new_run_dir(_base_dir(), req.job_name)
    return plan_sweep(profile, req, list(program), trials, sweep_opts, run_dir, preview=preview)


@_api_errors
def sweep(program: Sequence[str], *, params: Sequence[str] = (), params_file: Optional[str] = None,
          seeds: Optional[int] = None, max_running: Optional[int] = None, pack: Optional[int] = None,
          out: Callable[[str], None] = sys.stdout.write, **options) -> "Sweep":
    """Submit ``program`` (``{name}`` fields in its arguments) once per trial of the grid."""
    from ..sweeps.grid import build_trials
    from ..runs.sweep_submit import submit_sweep

    trials = build_trials(params, params_file, seeds)
    sp = plan(program, trials, max_running=max_running, pack=pack, **options)
    return _start(sp, out)


def resume(run: Union[str, Path], out: Callable[[str], None] = sys.stdout.write) -> "Sweep":
    """Submit again only the trials of ``run`` that failed, timed out, were cancelled or never ran."""
    from ..resources import ResourceRequest
    from ..site.registry import choose_site
    from ..sweeps import record
    from ..sweeps.grid import Trial
    from ..runs.sweep_plan import SweepOptions, plan_sweep
    from ..runs.sweep_submit import submit_sweep
    from ..runs.sweep_view import find_run

    v = find_run(str(run))
    if v.live:
        raise WmlError(f"sweep {v.rec.run_id} still has a job queued or running ({', '.join(j.job_id for j in v.jobs if not j.state.final)}); "
                       f"resume it once that has ended, or wml cancel {v.rec.run_id} first")
    todo = [t.index for t in v.trials if t.state in (record.FAILED, record.TIMEOUT, record.CANCELLED, record.MISSING)]
    if not todo:
        raise WmlError(f"sweep {v.rec.run_id}: every trial completed; nothing to resume")
    rec = v.rec
    req = ResourceRequest(**{k: tuple(tuple(x) if isinstance(x, list) else x for x in val) if isinstance(val, list) else val
                             for k, val in (rec.request or {}).items()})
    trials = [Trial(i, tuple(p.items())) for i, p in enumerate(rec.trials)]
    k = len(list(v.run_dir.glob("submit-*"))) + 1
    sp = plan_sweep(choose_site(rec.site), req, rec.program, trials,
                    SweepOptions(max_running=rec.max_running, pack=rec.pack_nodes), v.run_dir,
                    run_id=rec.run_id, only=todo, submit_index=k, workdir=Path(rec.workdir) if rec.workdir else None)
    for i in todo:         # shown PENDING until the rerun starts them; the attempt count is kept
        prev = record.read_state(v.run_dir, i) or {}
        record.write_state(v.run_dir, i, {**prev, "index": i, "params": rec.trials[i], "state": record.PENDING})
    keep = dataclasses.replace(rec, job_ids=list(rec.job_ids))
    record.save(v.run_dir, keep)
    result = submit_sweep(sp, out=out, new=False)
    return Sweep(v.run_dir, submit_result=result, rerun=todo)


START_TIMEOUT_S = 60.0


def _start(sp, out: Callable[[str], None], new: bool = True) -> "Sweep":
    """Submit ``sp`` and return its job at once.  A cluster's scheduler queues it; the local
    site runs it in a thread of this process (as ``wml submit`` runs it, ended at its walltime,
    ``wml cancel`` from another shell), so ``state()``, ``wait()`` and ``cancel()`` mean what
    they mean on a cluster and two submits run side by side.  Returns once the job is recorded
    (RUNNING in ``wml jobs``); this script's exit waits for its local jobs to end."""
    import threading

    from ..runs.sweep_submit import submit_sweep, write_run_dir

    if sp.plan.site.scheduler != "local":
        return Sweep(sp.run_dir, submit_result=submit_sweep(sp, out=out, new=new))
    if new:
        write_run_dir(sp)
    job = Sweep(sp.run_dir)
    done = threading.Event()

    def run() -> None:
        try:
            job.submit_result = submit_sweep(sp, out=out, new=False)
        except BaseException as e:  # noqa: BLE001 - said by wait() and result()
            job._error = e
        finally:
            done.set()

    job._thread = threading.Thread(target=run, name=f"wml-local-{sp.record.run_id}", daemon=False)
    job._thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not done.is_set() and not job.view(refresh=False).live:
        if time.monotonic() > deadline:
            raise WmlError(f"job {sp.record.run_id} was not recorded as running within {START_TIMEOUT_S:g} s "
                           f"(wml jobs; its directory {sp.run_dir})")
        time.sleep(0.02)
    if job._error is not None and isinstance(job._error, WmlError):
        raise job._error
    return job


class Sweep:
    """A submitted sweep (or function call): its trials' states, results and logs."""

    def __init__(self, run_dir: Path, submit_result=None, rerun: Optional[List[int]] = None) -> None:
        self.run_dir = Path(run_dir)
        self.submit_result = submit_result
        self.rerun = rerun
        self._thread = None          # the local site: the thread running the job
        self._error: Optional[BaseException] = None

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def __repr__(self) -> str:
        try:
            v = self.view(refresh=False)
            jobs = ", ".join(f"{j.job_id} {j.state.value}" for j in v.jobs) or "no job recorded"
            return f"<wml job {self.run_id}: {v.rec.size} trial(s) on {v.rec.site}, {v.count_text()}; {jobs}>"
        except (WmlError, OSError):
            return f"<wml job {self.run_id} ({self.run_dir})>"

    def view(self, refresh: bool = True):
        from ..sweeps import record
        from ..runs.sweep_view import view

        return view(self.run_dir, record.require(self.run_dir), refresh=refresh)

    def state(self) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT or CANCELLED (the sweep as a whole)."""
        return self.view().state

    def wait(self, timeout: Optional[float] = None, poll_s: float = POLL_S) -> str:
        """Until no job of the sweep is queued or running; its final state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._thread is not None:        # the local site: the job ends when its thread does
            self._thread.join(timeout)
            if self._error is not None and not isinstance(self._error, (WmlError, KeyboardInterrupt)):
                raise self._error
        while True:
            v = self.view()
            if not v.live:
                return v.state
            if deadline is not None and time.monotonic() > deadline:
                running = ", ".join(j.job_id for j in v.jobs if not j.state.final)
                raise WmlError(f"sweep {self.run_id} had not ended after {timeout:g} s (waiting for job(s) {running})")
            time.sleep(poll_s)

    def logs(self, trial: int = 0) -> str:
        from ..sweeps import record

        path = record.trial_dir(self.run_dir, trial) / record.OUTPUT_FILE
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""

    def cancel(self) -> List[str]:
        """Cancel every job of the sweep still queued or running (its array, its allocation)."""
        from ..jobs.lifecycle import cancel

        done = []
        for j in self.view().jobs:
            if not j.state.final:
                cancel(j)
                done.append(j.job_id)
        return done

    def result(self, trial: int = 0, timeout: Optional[float] = None) -> Any:
        """Trial ``trial``'s return value (a function's, from rank 0; a program's: the metrics
        of its last JSON line); waits for the sweep first.  A function's exception is raised
        again here with the remote traceback as its ``__cause__``."""
        self.wait(timeout)
        return _load_result(self.run_dir, trial, self.logs(trial))

    def results(self, timeout: Optional[float] = None) -> List[Any]:
        self.wait(timeout)
        from ..sweeps import record

        n = record.require(self.run_dir).size
        return [_load_result(self.run_dir, i, self.logs(i)) for i in range(n)]


Job = Sweep


def _load_result(run_dir: Path, trial: int, logs: str) -> Any:
    import cloudpickle

    from ..sweeps import record

    path = record.trial_dir(run_dir, trial) / record.RESULT_FILE
    try:
        kind, payload, tb = cloudpickle.loads(path.read_bytes())
    except FileNotFoundError:
        st = record.read_state(run_dir, trial) or {}
        if st.get("state") == record.COMPLETED and not (run_dir / CALLS_FILE).exists():
            return st.get("metrics")       # a program's trial: the metrics it printed (its last JSON line)
        tail = "; ".join(logs.strip().splitlines()[-3:])
        raise RemoteError(f"trial {trial} left no result ({st.get('state', 'never ran')}, exit status "
                          f"{st.get('exit_code')}): {tail or 'no output'}") from None
    if kind == "ok":
        return payload
    if isinstance(payload, SystemExit) or isinstance(payload, KeyboardInterrupt):
        # raised here they would end the caller's own script without a word
        what = (f"exited with status {payload.code}" if isinstance(payload, SystemExit)
                else "was interrupted (KeyboardInterrupt)")
        exc = RemoteError(f"trial {trial}: the function {what} (sys.exit in the job)")
    elif isinstance(payload, BaseException):
        exc = payload
    else:
        exc = RemoteError(f"trial {trial} failed: {payload}")
    exc.__cause__ = RemoteTraceback(tb)
    raise exc


# -- functions --------------------------------------------------------------------------------
def _submit_calls(fn: Callable, calls: List[tuple], *, max_running=None, pack=None,
                  out: Callable[[str], None] = None, **options) -> Sweep:
    import cloudpickle

    from ..sweeps.grid import Trial
    from ..runs.sweep_submit import submit_sweep, write_run_dir

    if not callable(fn):
        raise WmlError(f"submit: {fn!r} is neither a program (a list of words or a path) nor a function")
    source = getattr(getattr(fn, "__code__", None), "co_filename", None)
    try:
        blob = cloudpickle.dumps((fn, calls, source))
    except Exception as e:      # what does not pickle: one line naming it
        raise WmlError(f"cannot send {getattr(fn, '__name__', fn)!r} to the job: {type(e).__name__}: {e}") from None
    trials = [Trial(i, (("call", str(i)),)) for i in range(len(calls))]
    dry_run = options.pop("dry_run", False)
    opts = job_options(options.pop("opts", None), **options)
    if opts.job_name == "wml-job":
        name = "".join(c for c in f"py-{getattr(fn, '__name__', 'fn')}" if c.isalnum() or c in "-_.")[:40]
        opts = opts.replace(job_name=name)
    options = {"opts": opts}
    program = [sys.executable, "-m", "wmlce_tools.api.remote", "{call}"]
    sp = plan(program, trials, max_running=max_running, pack=pack, preview=dry_run, **options)
    if dry_run:
        return sp
    write_run_dir(sp, extra={CALLS_FILE: blob})
    return _start(sp, out or (lambda s: sys.stderr.write(s)), new=False)


@_api_errors
def submit(target: Union[Callable, str, Sequence[str]], *args, kwargs: Optional[dict] = None, **options) -> Sweep:
    """Submit a function call ``target(*args, **kwargs)`` or a program (a path or a list of
    words, its arguments in ``args``) with ``wml submit``'s options (``nodes=2``,
    ``walltime="30m"``...); returns the job.  ``dry_run=True``: nothing is submitted; returns
    the checked plan (``.script``, ``.describe()``)."""
    _check_options(options, callable(target))
    if callable(target):
        return _submit_calls(target, [(args, dict(kwargs or {}))], **options)
    if kwargs:
        raise WmlError("kwargs= is for a function's keyword arguments; a program takes its arguments as words")
    if isinstance(target, (str, os.PathLike)):
        program = [os.fspath(target), *_words(args)]
    elif isinstance(target, (list, tuple)) and target and all(isinstance(w, (str, os.PathLike)) for w in target):
        program = [*map_words(target), *_words(args)]
    else:
        raise WmlError(f"submit: {target!r} is neither a function nor a program (a path, or a list of words)")
    return _submit_program(program, **options)


def map_words(words) -> List[str]:
    return [os.fspath(w) for w in words]


def _words(args) -> List[str]:
    """A program's arguments as words."""
    return [str(a) for a in args]


def _submit_program(program: List[str], out: Callable[[str], None] = None, dry_run: bool = False,
                    **options) -> Sweep:
    from ..sweeps.grid import Trial
    from ..runs.sweep_submit import submit_sweep

    sp = plan(program, [Trial(0, ())], preview=dry_run, **options)
    if dry_run:
        return sp
    return _start(sp, out or sys.stdout.write)


@_api_errors
def map(fn: Callable, items: Iterable, *, max_running: Optional[int] = None, pack: Optional[int] = None,
        timeout: Optional[float] = None, **options) -> List[Any]:
    """``[fn(x) for x in items]``, each call a trial of one sweep (an array or packed, as the
    site says), results in the order of ``items``; the first failing trial's exception is raised.
    An empty ``items`` is ``[]`` (nothing submitted)."""
    _check_options(options, True)
    calls = [((x,), {}) for x in items]
    if not calls:
        return []
    job = _submit_calls(fn, calls, max_running=max_running, pack=pack, **options)
    return job.results(timeout)

