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
    req, _ = request_from(opts)
    return choose_site(opts.site), req


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


def sweep(program: Sequence[str], *, params: Sequence[str] = (), params_file: Optional[str] = None,
          seeds: Optional[int] = None, max_running: Optional[int] = None, pack: Optional[int] = None,
          out: Callable[[str], None] = sys.stdout.write, **options) -> "Sweep":
    """Submit ``program`` (``{name}`` fields in its arguments) once per trial of the grid."""
    from ..sweeps.grid import build_trials
    from ..runs.sweep_submit import submit_sweep

    trials = build_trials(params, params_file, seeds)
    sp = plan(program, trials, max_running=max_running, pack=pack, **options)
    result = submit_sweep(sp, out=out)
    return Sweep(sp.run_dir, submit_result=result)


def resume(run: Union[str, Path], out: Callable[[str], None] = sys.stdout.write) -> "Sweep":
    """Submit again only the trials of ``run`` that failed, were cancelled or never ran."""
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
    todo = [t.index for t in v.trials if t.state in (record.FAILED, record.CANCELLED, record.MISSING)]
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


class Sweep:
    """A submitted sweep (or function call): its trials' states, results and logs."""

    def __init__(self, run_dir: Path, submit_result=None, rerun: Optional[List[int]] = None) -> None:
        self.run_dir = Path(run_dir)
        self.submit_result = submit_result
        self.rerun = rerun

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def view(self, refresh: bool = True):
        from ..sweeps import record
        from ..runs.sweep_view import view

        return view(self.run_dir, record.require(self.run_dir), refresh=refresh)

    def state(self) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED or CANCELLED (the sweep as a whole)."""
        return self.view().state

    def wait(self, timeout: Optional[float] = None, poll_s: float = POLL_S) -> str:
        """Until no job of the sweep is queued or running; its final state."""
        deadline = None if timeout is None else time.monotonic() + timeout
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
    exc = payload if isinstance(payload, BaseException) else RemoteError(f"trial {trial} raised {payload}")
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
    try:
        blob = cloudpickle.dumps((fn, calls))
    except Exception as e:      # what does not pickle: one line naming it
        raise WmlError(f"cannot send {getattr(fn, '__name__', fn)!r} to the job: {type(e).__name__}: {e}") from None
    trials = [Trial(i, (("call", str(i)),)) for i in range(len(calls))]
    if not trials:
        raise WmlError("map: the list is empty")
    opts = job_options(options.pop("opts", None), **options)
    if opts.job_name == "wml-job":
        name = "".join(c for c in f"py-{getattr(fn, '__name__', 'fn')}" if c.isalnum() or c in "-_.")[:40]
        opts = opts.replace(job_name=name)
    options = {"opts": opts}
    program = [sys.executable, "-m", "wmlce_tools.api.remote", "{call}"]
    sp = plan(program, trials, max_running=max_running, pack=pack, **options)
    write_run_dir(sp, extra={CALLS_FILE: blob})
    result = submit_sweep(sp, out=out or (lambda s: sys.stderr.write(s)), new=False)
    return Sweep(sp.run_dir, submit_result=result)


def submit(target: Union[Callable, str, Sequence[str]], *args, **options) -> Sweep:
    """Submit a function call ``target(*args)`` or a program (a path or a list of words, its
    arguments in ``args``) with ``wml submit``'s options; returns the job."""
    fn_kwargs = options.pop("kwargs", None) or {}
    if callable(target):
        return _submit_calls(target, [(args, fn_kwargs)], **options)
    program = [target, *_words(args)] if isinstance(target, str) else [*target, *_words(args)]
    return _submit_program(program, **options)


def _words(args) -> List[str]:
    """A program's arguments as words."""
    return [str(a) for a in args]


def _submit_program(program: List[str], out: Callable[[str], None] = None, **options) -> Sweep:
    from ..sweeps.grid import Trial
    from ..runs.sweep_submit import submit_sweep

    sp = plan(program, [Trial(0, ())], **options)
    result = submit_sweep(sp, out=out or sys.stdout.write)
    return Sweep(sp.run_dir, submit_result=result)


def map(fn: Callable, items: Iterable, *, max_running: Optional[int] = None, pack: Optional[int] = None,
        timeout: Optional[float] = None, **options) -> List[Any]:
    """``[fn(x) for x in items]``, each call a trial of one sweep (an array or packed, as the
    site says), results in the order of ``items``; the first failing trial's exception is raised."""
    calls = [((x,), {}) for x in items]
    job = _submit_calls(fn, calls, max_running=max_running, pack=pack, **options)
    return job.results(timeout)

