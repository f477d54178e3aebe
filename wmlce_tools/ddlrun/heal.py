"""``ddlrun --restarts N [--spare-nodes K]``: a run that heals inside its own allocation.

Around what ``runner.run`` does for one launch, attempt after attempt:

1. Every rank writes a heartbeat (``DDL_HEARTBEAT_DIR``; ddl_runtime/core/heartbeat.py) and its
   uncaught exception; ddlrun reads them every second or so (``Watcher``) and decides which
   ranks are hung (``runstats/liveness.py``): the attempt is ended, each hung rank named with its
   node and its Python stack.
2. When an attempt ends without finishing (exit status 0) or stopping for the walltime (75), it
   says what failed: the hung ranks; else the ranks that failed first (killed by a signal, or
   an exception, with its traceback, or an exit status); else, after the launcher ended, the
   nodes none of whose ranks reported (lost).
3. A node that failed (a rank on it killed by a signal, hung, or lost with it) is left out, and
   the launch is rebuilt for the nodes left through ``build_plan`` (``exclude``; a spare of
   ``--spare-nodes`` takes its place: ``spares.py``) and relaunched; the ranks resume from the
   last checkpoint (``$WML_CHECKPOINT_DIR``: the job directory's ``checkpoints`` unless set;
   ``Checkpointer(every=N)`` bounds the steps redone).  An exception or an exit status restarts
   on the same nodes.
4. No restart when none is left, when ddlrun itself got SIGINT, SIGTERM or SIGHUP (a cancel, the
   walltime's end: it passes them to the ranks, whose end is then no fault), when no spare can replace a failed node (the attempts record
   names the nodes the next job should leave out: a chain's next segment does), or when a rank
   raised the same exception at the same step as in an earlier attempt (a bug, not a fault: the
   run ends with that traceback).
5. Each attempt goes to ``attempts.json`` in the job directory (``runstats/attempts.py``): the
   nodes, what failed, the time lost (the fault to the first step after the restart) and the
   steps redone; ddlrun's end line says it in one line.

They all go to the job directory (``$WML_JOB_DIR``), or beside the ranks' records when
``DDL_STATS_DIR`` names them (a sweep's trial: ``trials/<i>``, so trials packed into one job keep
apart), else (ddlrun by hand) to ``./ddlrun-<job id>``, said in one line.  Each attempt's ranks get ``WML_ATTEMPT`` (1, 2, ...).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, TextIO, Tuple

from ddl_runtime.checkpoint.protocol import CHECKPOINT_DIR_ENV, EXIT_RESUME, LATEST_FILE

from ..errors import WmlError
from ..runstats import attempts as _attempts
from ..runstats import liveness
from .mps import around_ranks
from .plan import JOB_ID_VARS, DdlrunOptions, Launch as LaunchPlan, _once_per_node, build_plan
from .runner import Attempt as Launch
from .runner import StderrRelay, run_attempt
from . import nodestate
from .spares import NoSpareLeft

HEAL_GRACE_S = 1.0        # after a rank failed, the others' time before they are stopped (they are restarted)
STACK_WAIT_S = 3.0        # a hung rank's stack dump may land just after the decision
BEATS, STATS, CHECKPOINTS = "heartbeat", "stats", "checkpoints"
ATTEMPT_ENV = "WML_ATTEMPT"
ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)   # passed to the ranks by ddlrun: the job is ending
RESTARTS_ENV = "WML_RESTARTS"


def wanted(opts: DdlrunOptions) -> bool:
    return bool(opts.restarts or opts.spare_nodes)


@dataclass(frozen=True)
class HealDirs:
    run: Path          # attempts.json
    beats: Path        # rank<N>.beat / .stack / .error
    stats: Path        # the ranks' records; an attempt's are kept in stats/attempt-<n>
    checkpoints: Path


def _export_value(exports, name: str) -> Optional[str]:
    for item in exports:
        key, eq, value = item.partition("=")
        if key == name:
            return value if eq else None
    return None


def prepare(opts: DdlrunOptions, env: Mapping[str, str], err: TextIO) -> Tuple[DdlrunOptions, HealDirs]:
    """The first attempt's options: every rank's heartbeat directory, its attempt, and the
    checkpoint directory and records' directory where none is set."""
    from ddl_runtime.core.jobenv import stats_dir

    job_dir = env.get("WML_JOB_DIR")
    if env.get("DDL_STATS_DIR"):        # a sweep's trial (trials/<i>/stats): beside its own records, not the job's
        run = Path(os.path.abspath(env["DDL_STATS_DIR"])).parent
    elif job_dir:
        run = Path(job_dir)
    else:
        job = next((env[v] for v in JOB_ID_VARS if env.get(v)), None) or f"pid{os.getpid()}"
        run = Path.cwd() / f"ddlrun-{job}"
    ckpt = _export_value(opts.exports, CHECKPOINT_DIR_ENV) or env.get(CHECKPOINT_DIR_ENV)
    stats = _export_value(opts.exports, "DDL_STATS_DIR") or stats_dir(env)
    extra = [("DDL_HEARTBEAT_DIR", str(run / BEATS), f"{WHY}: each rank's heartbeat"), _attempt(1)]
    if not ckpt:
        ckpt = str(run / CHECKPOINTS)
        extra.append((CHECKPOINT_DIR_ENV, ckpt, f"{WHY}: where a restart resumes from (none was set)"))
    if not stats:
        stats = str(run / STATS)
        extra.append(("DDL_STATS_DIR", stats, f"{WHY}: the ranks' records (none was set)"))
    if not opts.dry_run:
        try:
            (run / BEATS).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WmlError(f"--restarts: cannot make {run / BEATS}: {e.strerror}") from None
        if not job_dir and not env.get("DDL_STATS_DIR"):
            err.write(f"ddlrun: --restarts: heartbeats, records, checkpoints and the attempts in {run} "
                      f"(WML_JOB_DIR chooses)\n")
    dirs = HealDirs(run, run / BEATS, Path(os.path.abspath(stats)), Path(os.path.abspath(ckpt)))
    return dataclasses.replace(opts, own=(*opts.own, *extra)), dirs


WHY = "ddlrun --restarts"


def _attempt(index: int) -> Tuple[str, str, str]:
    return (ATTEMPT_ENV, str(index), f"{WHY}: this attempt's number")


def attempt_options(opts: DdlrunOptions, index: int, exclude: List[str]) -> DdlrunOptions:
    own = tuple(x for x in opts.own if x[0] != ATTEMPT_ENV) + (_attempt(index),)
    return dataclasses.replace(opts, own=own, exclude=tuple(exclude))


class Watcher:
    """Reads the ranks' heartbeats every ``scan_s`` during an attempt and says when ranks hang."""

    def __init__(self, plan: LaunchPlan, beats: Path) -> None:
        self.plan, self.dir = plan, beats
        self.size = plan.layout.size
        self.watch = liveness.Watch(self.size)
        self.scan_s = max(1.0, self.size / 2000.0)     # 10,000 ranks: a scan every 5 s
        self.next_scan = 0.0
        self.beats: List[Optional[liveness.Beat]] = [None] * self.size
        self.done: Dict[int, int] = {}      # rank -> the run's steps done (read when the attempt has ended)
        self.stall: Optional[liveness.Stall] = None

    def scan(self, now: float) -> None:
        self.beats = liveness.read_beats(self.dir, self.size)
        self.watch.update(self.beats, now)

    def final(self) -> None:
        """The attempt has ended: the last beats, and every rank's exact steps."""
        self.scan(time.monotonic())
        self.done = liveness.read_steps(self.dir, self.size)

    @property
    def reached(self) -> Optional[int]:
        return max(self.done.values()) if self.done else liveness.step_reached(self.beats)

    def __call__(self, now: float, relay: StderrRelay) -> Optional[str]:
        if now < self.next_scan:
            return None
        self.next_scan = now + self.scan_s
        self.scan(now)
        stall = self.watch.stalled(now, liveness.BEAT_S + self.scan_s)
        if not len(stall.hung):
            return None
        self.stall = stall
        rpn = self.plan.layout.ranks_per_node
        named = ", ".join(f"rank {r} on {self.plan.node_name(r // rpn)}" for r in stall.hung[:8])
        more = f" and {len(stall.hung) - 8} more" if len(stall.hung) > 8 else ""
        limit = float(min(self.watch.limit[stall.hung]))
        waiting = f"; {len(stall.waiting)} rank(s) wait for it in a collective" if len(stall.waiting) else ""
        return (f"{named}{more} hung: no step ended for {float(max(stall.stalled_s)):.0f} s "
                f"(its limit {limit:.0f} s){waiting}")


def _wall(t_monotonic: float) -> float:
    return time.time() - (time.monotonic() - t_monotonic)


def _read(path: Path, wait_s: float = 0.0) -> Optional[str]:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            if text.strip():
                return text
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def _errors(beats: Path) -> Dict[int, dict]:
    """rank -> its uncaught exception (core/heartbeat.py's rank<N>.error), for the ranks that wrote one."""
    out: Dict[int, dict] = {}
    try:
        names = [n for n in os.listdir(beats) if n.startswith("rank") and n.endswith(".error")]
    except OSError:
        return out
    for n in names:
        try:
            doc = json.loads((beats / n).read_text(encoding="utf-8"))
            out[int(doc["rank"])] = doc
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def classify(plan: LaunchPlan, launch: Launch, watcher: Watcher,
             env: Mapping[str, str] = os.environ) -> Tuple[List[_attempts.Fault], List[int], float]:
    """(what failed, the layout nodes that failed, the wall time of the fault)."""
    rpn = plan.layout.ranks_per_node
    beats = watcher.beats

    def name(rank: int) -> str:
        return plan.node_name(rank // rpn)

    def step(rank: int) -> Optional[int]:
        if rank in watcher.done:
            return watcher.done[rank]
        b = beats[rank] if 0 <= rank < len(beats) else None
        return b.step if b is not None else None

    stall = watcher.stall
    if stall is not None:
        faults = []
        for r, stalled in zip(stall.hung, stall.stalled_s):
            r = int(r)
            stack = _read(watcher.dir / f"rank{r}.stack", STACK_WAIT_S if not faults else 0.5)
            faults.append(_attempts.Fault(r, name(r), "hang", step=step(r), stack=stack, stalled_s=float(stalled),
                                          limit_s=float(watcher.watch.limit[r])))
        first = float(min(watcher.watch.changed[stall.hung]))
        return faults, sorted({int(r) // rpn for r in stall.hung}), _wall(first)
    reports = [liveness.Report(e.rank, e.code, t) for e, t in launch.relay.reports()]
    first = liveness.failed_first(reports, EXIT_RESUME)
    errors = _errors(watcher.dir)
    if errors:       # an uncaught exception says more than any exit status (MPI_Abort may end every rank unreported)
        faults = []
        codes = {r.rank: r.code for r in reports}
        for rank in sorted(errors, key=lambda r: errors[r].get("at") or 0.0):
            e = errors[rank]
            faults.append(_attempts.Fault(rank, name(rank), "exception", code=codes.get(rank), step=e.get("step"),
                                          exception=f"{e.get('type')}: {e.get('message')} ({e.get('where')})",
                                          traceback=e.get("traceback")))
        at = min((e.get("at") for e in errors.values() if e.get("at")), default=None)
        return faults, [], at if at is not None else (_wall(first[0].t) if first else time.time())
    gone = set(nodestate.lost_hosts(plan.site.scheduler, env, plan.node_hosts))
    if gone:         # the scheduler took nodes out of the job: they are the fault, whatever the ranks said
        lost = [n for n in range(plan.layout.nodes) if plan.node_hosts[n] in gone]
        faults = [_attempts.Fault(r, name(r), "lost", step=step(r)) for n in lost for r in range(n * rpn, (n + 1) * rpn)]
        return faults, lost, _last_sign(beats, [f.rank for f in faults])
    if first:
        killed = [r for r in first if liveness.signal_name(r.code)]
        if killed:
            faults = [_attempts.Fault(r.rank, name(r.rank), "signal", signal=liveness.signal_name(r.code), code=r.code,
                                      step=step(r.rank)) for r in killed]
            return faults, sorted({r.rank // rpn for r in killed}), _wall(first[0].t)
        return ([_attempts.Fault(r.rank, name(r.rank), "exit", code=r.code, step=step(r.rank)) for r in first], [],
                _wall(first[0].t))
    lost = liveness.lost_nodes(plan.layout.size, rpn, [r.rank for r in reports])
    if lost:
        faults = [_attempts.Fault(r, name(r), "lost", step=step(r))
                  for n in lost for r in range(n * rpn, (n + 1) * rpn)]
        return faults, lost, _last_sign(beats, [f.rank for f in faults])
    return [_attempts.Fault(None, None, "exit", code=launch.status)], [], time.time()


def _last_sign(beats: List[Optional[liveness.Beat]], ranks: List[int]) -> float:
    """When lost ranks were last heard of: their last heartbeat (a second at most before the node
    went), else now."""
    heard = [beats[r].at for r in ranks if 0 <= r < len(beats) and beats[r] is not None]
    return max(heard) if heard else time.time()


def _latest_step(checkpoints: Path) -> Optional[int]:
    try:
        return int(json.loads((checkpoints / LATEST_FILE).read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _clear(beats: Path) -> None:
    try:
        for name in os.listdir(beats):
            if name.startswith("rank"):
                (beats / name).unlink()
    except OSError:
        pass


def _keep_records(stats: Path, index: int) -> None:
    """An attempt's rank records move to stats/attempt-<index> (the next attempt writes stats/)."""
    try:
        names = [n for n in os.listdir(stats) if n.startswith("rank") and n.endswith(".json")]
    except OSError:
        return
    if not names:
        return
    keep = stats / f"attempt-{index}"
    keep.mkdir(exist_ok=True)
    for n in names:
        try:
            os.replace(stats / n, keep / n)
        except OSError:
            pass


def _exception_key(f: _attempts.Fault) -> tuple:
    return (f.exception, f.step)


def _say(err: TextIO, text: str) -> None:
    err.write(text + "\n")
    err.flush()


def run(plan: LaunchPlan, opts: DdlrunOptions, dirs: HealDirs, env: Mapping[str, str] = os.environ,
        err: TextIO = sys.stderr) -> int:
    """Attempt after attempt (see the module docstring); returns the last attempt's status."""
    rec = _attempts.Attempts(restarts=opts.restarts, spare_nodes=opts.spare_nodes,
                             checkpoint_dir=str(dirs.checkpoints))
    excluded: List[str] = list(opts.exclude)
    raised: Dict[tuple, int] = {}
    index = 1
    while True:
        _clear(dirs.beats)
        attempt = _attempts.Attempt(index=index, nodes=[plan.node_name(n) for n in range(plan.layout.nodes)],
                                    started=time.time(), restored_step=_latest_step(dirs.checkpoints))
        rec.attempts.append(attempt)
        _save(rec, dirs, err)
        watcher = Watcher(plan, dirs.beats)
        try:
            with around_ranks(plan, err, _once_per_node):    # CUDA MPS on this attempt's nodes (a spare's too)
                launch = run_attempt(plan, err, watch=watcher, grace=HEAL_GRACE_S)
        except WmlError as e:
            if index == 1:
                raise
            attempt.ended, attempt.outcome = time.time(), "failed"
            attempt.note = f"cannot relaunch: {e}"
            _say(err, f"ddlrun: {attempt.note}")
            _save(rec, dirs, err)
            return 1
        watcher.final()
        attempt.ended, attempt.status = time.time(), launch.status
        attempt.first_step_at = watcher.watch.first_step_at
        attempt.reached_step = watcher.reached
        bases = {b.step_base for b in watcher.beats if b is not None}
        if bases:       # what the ranks restored, as they said it
            attempt.restored_step = min(bases) - 1 if min(bases) > 0 else None
        if launch.status == 0:
            attempt.outcome = "finished"
            break
        if launch.status == EXIT_RESUME:
            attempt.outcome = "stopped"
            break
        ended = [signal.Signals(g).name for g in launch.signals if g in ENDING]
        if ended:           # a cancel or the walltime's end reached ddlrun itself: not a fault to heal
            attempt.outcome = "failed"
            attempt.note = f"ddlrun got {ended[0]} (a cancel, or the walltime's end): not restarted"
            _say(err, f"ddlrun: {attempt.note}")
            break
        attempt.outcome = "failed"
        faults, failed, attempt.fault_at = classify(plan, launch, watcher, env)
        attempt.faults = faults
        attempt.left_out = [plan.node_name(n) for n in failed]
        for line in _fault_lines(attempt):
            _say(err, line)
        if index > opts.restarts:
            attempt.note = f"no restart left (--restarts {opts.restarts})"
            rec.exclude_next = [*excluded, *attempt.left_out] if attempt.left_out else []
            break
        bug = next((raised[_exception_key(f)] for f in faults if f.kind == "exception" and _exception_key(f) in raised),
                   None)
        if bug is not None:
            f = next(f for f in faults if f.kind == "exception")
            attempt.note = (f"the same exception at the same step as in attempt {bug}: a bug, not a fault; "
                            f"not restarted again")
            _say(err, f"ddlrun: attempt {index}: rank {f.rank} raised {f.exception} at step {f.step} again, as in "
                      f"attempt {bug}: a bug, not a fault; not restarted. Its traceback:")
            err.write(f.traceback or "(none recorded)\n")
            break
        for f in faults:
            if f.kind == "exception":
                raised[_exception_key(f)] = index
        tried = [*excluded, *(n for n in attempt.left_out if n not in excluded)]
        try:
            nxt = build_plan(attempt_options(opts, index + 1, tried), {**env, ATTEMPT_ENV: str(index + 1)})
        except NoSpareLeft as e:
            attempt.note = f"not restarted: {e}; the next job should leave out {', '.join(tried)}"
            rec.exclude_next = tried
            _say(err, f"ddlrun: {attempt.note}")
            break
        except WmlError as e:
            attempt.note = f"cannot relaunch: {e}"
            _say(err, f"ddlrun: {attempt.note}")
            break
        _keep_records(dirs.stats, index)
        ckpt = _latest_step(dirs.checkpoints)
        frm = f"the checkpoint of step {ckpt}" if ckpt is not None else "the start (no checkpoint yet)"
        without = f" without {', '.join(attempt.left_out)}" if attempt.left_out else ""
        _say(err, f"ddlrun: restart {index} of {opts.restarts}: relaunching on "
                  f"{', '.join(nxt.node_name(n) for n in range(nxt.layout.nodes))}{without}, from {frm}")
        plan, excluded, index = nxt, tried, index + 1
    _save(rec, dirs, err)
    if len(rec.attempts) > 1 or rec.attempts[-1].outcome == "failed":
        _say(err, f"ddlrun: attempts: {rec.one_line()} ({dirs.run / _attempts.FILE})")
    return launch.status


def _fault_lines(a: _attempts.Attempt) -> List[str]:
    out = []
    for f in a.faults:
        out.append(f"ddlrun: attempt {a.index} failed: {f.describe()}")
        if f.kind == "hang":
            out.append(f"ddlrun: rank {f.rank}'s Python stack:" if f.stack else
                       f"ddlrun: rank {f.rank}: no Python stack was written (not a ddl_runtime program, or it "
                       f"hung before its warm-up ended)")
            if f.stack:
                out += ["    " + line for line in f.stack.rstrip("\n").splitlines()]
    return out


def _save(rec: _attempts.Attempts, dirs: HealDirs, err: TextIO) -> None:
    try:
        dirs.run.mkdir(parents=True, exist_ok=True)
        _attempts.save(dirs.run, rec)
    except OSError as e:
        _say(err, f"ddlrun: warning: cannot write {dirs.run / _attempts.FILE}: {e.strerror or e}")


def clean_up(dirs: HealDirs) -> None:
    """The heartbeats are of no use once ddlrun has ended."""
    shutil.rmtree(dirs.beats, ignore_errors=True)
