"""Run a Launch: write the placement file, print the command, run the launcher, and
report the first failing rank.

The launcher runs in its own process group (so the whole job can be signalled at once) and
gets SIGTERM if ddlrun dies; SIGINT/SIGTERM/SIGHUP reaching ddlrun are passed on to it, and so
is SIGUSR1, the stop request of a chained job (``wml submit --chain``: checkpoint and stop
before the walltime; one that arrives while the launcher is starting is passed on once it runs).
Ranks that all stop for the walltime exit ``EXIT_RESUME`` (75): ddlrun exits 75 too, with a
line saying so, not as a failure.  Each rank's shim reports that 75 and exits 0 to the launcher
(``rankexec``: a planned stop must not trip srun's --kill-on-bad-exit), so ddlrun itself ends
ranks still running ``FAIL_GRACE_S`` seconds after the first stopped (the save was collective:
they were ending too).
The launcher's stderr passes through ddlrun, which takes out each rank's exit report
(``exitreport``): once a rank fails, the others get ``FAIL_GRACE_S`` seconds to finish (a
line says so; ``WML_DDLRUN_FAIL_GRACE_S`` changes it) before the job is stopped, so a rank
blocked in a collective with a dead peer cannot hang the job; ddlrun then exits with the
first failing rank's status (else the launcher's).
Under Open MPI, whose forwarder cuts lines into chunks and mixes the ranks' chunks, the launch
has ``--tag-output`` and both of the launcher's streams pass through ddlrun, each rank's lines
put back together (``tagged``).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Callable, List, Optional, TextIO

from ddl_runtime.checkpoint.protocol import EXIT_RESUME, STOP_SIGNAL_ENV

from ..quoting import sh_join
from .exitreport import RankExit, new_token, parse_report, parse_up, stop_signum
from .pdeathsig import TERM_ON_PARENT_DEATH
from .plan import Launch
from .tagged import whole_lines

FAIL_GRACE_S = 10.0
GRACE_VAR = "WML_DDLRUN_FAIL_GRACE_S"
KILL_AFTER_S = 10.0
POLL_S = 0.2
UP_WAIT_S = 15.0   # the longest a chained job's stop signal waits for ranks still starting
RELAY_DRAIN_S = 10.0
HOSTFILE_NAME = "hostfile"
LAUNCHER_KILLED = (128 + signal.SIGTERM, 128 + signal.SIGKILL)   # a rank's status when the launcher ended it


class StderrRelay(threading.Thread):
    """Copies the launcher's stderr to ours line by line, keeping the ranks' exit reports
    (``tags``: Open MPI's tag style, when the launch has --tag-output)."""

    def __init__(self, src: IO[bytes], token: str, fd: int = 2, tags: Optional[str] = None) -> None:
        super().__init__(daemon=True)
        self.src, self.token, self.fd, self.tags = src, token, fd, tags
        self._lock = threading.Lock()
        self._exits: List[RankExit] = []
        self._times: List[float] = []   # when each exit report came (monotonic)
        self._up: set = set()
        self.no_horovod = False     # a rank said "No module named 'horovod'"
        self.openmpi_root = False   # Open MPI's mpirun refused to run as root

    def run(self) -> None:
        broken = False
        for line in whole_lines(self.src, self.tags):
            report = parse_report(line, self.token)
            up = parse_up(line, self.token) if report is None else None
            if report is not None:
                with self._lock:
                    self._exits.append(report)
                    self._times.append(time.monotonic())
            elif up is not None:
                with self._lock:
                    self._up.add(up)
            else:
                if not self.no_horovod and b"No module named 'horovod" in line:
                    self.no_horovod = True
                if b"has detected an attempt to run as root" in line:
                    self.openmpi_root = True
                if not broken:
                    broken = not _write_all(self.fd, line)

    def _stop_ended(self, e: RankExit, stopped_before: bool) -> bool:
        """Exited EXIT_RESUME, or was terminated (SIGTERM/SIGKILL) after a rank had: the checkpoint
        is saved collectively before any rank exits EXIT_RESUME, so the others were ending too,
        and the launcher (srun --kill-on-bad-exit) ended one still in its exit: not a failure."""
        return e.code == EXIT_RESUME or (stopped_before and e.code in LAUNCHER_KILLED)

    def first_failure(self) -> Optional[RankExit]:
        """The first rank that failed: exited neither 0 nor EXIT_RESUME (stopped for the walltime),
        and was not ended by the launcher after a rank had stopped so."""
        with self._lock:
            stopped = False
            for e in self._exits:
                if self._stop_ended(e, stopped):
                    stopped = True
                elif e.code != 0:
                    return e
            return None

    def reports(self) -> List[tuple]:
        """Every exit report so far with when it came: (RankExit, monotonic time), in arrival order."""
        with self._lock:
            return list(zip(self._exits, self._times))

    def first_stop(self) -> Optional[RankExit]:
        """The first rank that exited EXIT_RESUME (saved and stopped for the walltime), if any."""
        with self._lock:
            return next((e for e in self._exits if e.code == EXIT_RESUME), None)

    def not_up(self, ranks: int) -> List[int]:
        """The ranks of 0..ranks-1 whose shim has neither said it is up nor ended."""
        with self._lock:
            seen = self._up | {e.rank for e in self._exits}
        return [r for r in range(ranks) if r not in seen]

    def still_running(self, ranks: int) -> List[int]:
        """The ranks of 0..ranks-1 whose exit has not been reported."""
        with self._lock:
            done = {e.rank for e in self._exits}
        return [r for r in range(ranks) if r not in done]

    def resumable(self) -> int:
        """How many ranks exited EXIT_RESUME or were ended by the launcher after one had."""
        with self._lock:
            count, stopped = 0, False
            for e in self._exits:
                if self._stop_ended(e, stopped):
                    count, stopped = count + 1, True
            return count


class StdoutRelay(threading.Thread):
    """Copies the launcher's stdout to ours, each rank's lines whole (Open MPI's tags taken out)."""

    def __init__(self, src: IO[bytes], tags: str, fd: int = 1) -> None:
        super().__init__(daemon=True)
        self.src, self.tags, self.fd = src, tags, fd

    def run(self) -> None:
        broken = False
        for line in whole_lines(self.src, self.tags):
            if not broken:
                broken = not _write_all(self.fd, line)


def _write_all(fd: int, data: bytes) -> bool:
    """Write ``data`` to ``fd``; False when ``fd`` is gone (the caller keeps draining its source,
    so the launcher never blocks)."""
    try:
        while data:
            data = data[os.write(fd, data):]
        return True
    except OSError:
        return False


def dry_run_text(plan: Launch) -> str:
    workdir = os.path.join(tempfile.gettempdir(), "ddlrun-<tmpdir>")
    placeholder = os.path.join(workdir, _placement_name(plan))
    hostfile = os.path.join(workdir, HOSTFILE_NAME)
    argv = plan.command(rankfile_path=placeholder if plan.placement else None,
                        hostfile_path=hostfile if plan.hostfile else None)
    lines = [sh_join(argv)]
    edf = plan.edf_text()
    if edf:
        lines.append("# the Container Engine's EDF, written at launch beside the rankfile:")
        lines += [f"#   {line}" for line in edf.splitlines()]
    if plan.placement:
        lines.append(f"# {placeholder}:")
        lines += [f"#   {line}" for line in plan.placement.splitlines()]
    if plan.hostfile:
        # thousands of lines: say what it holds rather than print it
        first, _, rest = plan.hostfile.partition("\n")
        last = rest.rstrip("\n").rpartition("\n")[2] or first
        lines.append(f"# {hostfile}: {plan.hostfile.count(chr(10))} hosts, one a line, in node order "
                     f"({first!r} .. {last!r}), written at launch and removed when ddlrun exits")
    from ..launch.describe import env_lines

    lines += [f"# {m.line} (the job script loads it)  <- {m.source}" for m in plan.plan.modules]
    lines += [f"# {line}" for line in env_lines(plan.plan, plan.decision)]
    from .mps import dry_run_lines

    lines += dry_run_lines(plan)
    return "\n".join(lines) + "\n"


def _placement_name(plan: Launch) -> str:
    return "erf" if plan.site.launcher == "jsrun" else "rankfile"


def _write(workdir: str, name: str, text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    path = os.path.join(workdir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


@dataclass
class Attempt:
    """How one launch ended: ddlrun's status, the launcher's, the ranks' exit reports, and what
    the watch said when it stopped the launch (``--restarts``: a hang; ddlrun/heal.py)."""
    status: int
    relay: "StderrRelay"
    stopped_by: Optional[str] = None
    signals: tuple = ()              # the signals ddlrun itself got (and passed on) meanwhile


Watch = Callable[[float, "StderrRelay"], Optional[str]]


def run(plan: Launch, err: TextIO = sys.stderr) -> int:
    return run_attempt(plan, err).status


def run_attempt(plan: Launch, err: TextIO = sys.stderr, watch: Optional[Watch] = None,
                grace: Optional[float] = None) -> Attempt:
    """Run the plan once.  ``watch(now, relay)`` is asked every poll; a line it returns is said and
    the launch is stopped (SIGTERM, then SIGKILL).  ``grace``: the others' time after a failure."""
    grace = fail_grace_s() if grace is None else grace
    workdir = tempfile.mkdtemp(prefix="ddlrun-")   # private (0700), removed with what it holds when ddlrun ends
    try:
        rankfile = _write(workdir, _placement_name(plan), plan.placement)
        hostfile = _write(workdir, HOSTFILE_NAME, plan.hostfile)
        edf = _write(workdir, "wml-edf.toml", plan.edf_text())
        token = new_token()
        argv = plan.command(rankfile_path=rankfile, report=token, hostfile_path=hostfile, edf_path=edf)
        err.write(f"ddlrun: {sh_join(argv)}\n")
        err.flush()
        record_launch(plan, argv)
        return _supervise(argv, plan.launcher_env(os.environ), token, err, grace, ranks=plan.layout.size,
                          tags=plan.output_tags, watch=watch)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


LAUNCH_RECORD = "launch.json"


def record_launch(plan: Launch, argv: List[str]) -> Optional[str]:
    """What this launch ran, beside the ranks' records (``$WML_JOB_DIR``, a sweep trial's
    directory): the command, the hosts, the plan, and each variable the ranks got with its
    source.  The run report reads it; a launch with no record directory writes none, and one
    that cannot be written is one warning line (the run goes on)."""
    from ddl_runtime.core.jobenv import stats_dir

    from ..atomic import write_json_atomic
    from pathlib import Path

    where = stats_dir(dict(plan.environ))
    if where is None:
        return None
    path = Path(where).parent / LAUNCH_RECORD
    data = {"command": argv, "hosts": list(plan.node_hosts), "mpi": plan.mpi_flavor, "started": time.time(),
            "plan": plan.plan.as_dict(),
            "env": [{"name": a.name, "value": a.value, "source": a.source, "where": a.where}
                    for a in plan.decision.report]}
    try:
        write_json_atomic(path, data)
    except OSError as e:
        sys.stderr.write(f"ddlrun: warning: cannot write {path}: {e.strerror}\n")
        return None
    return str(path)


def fail_grace_s(env=os.environ) -> float:
    from ..walltime import env_seconds

    return env_seconds(env, GRACE_VAR, FAIL_GRACE_S)


def _supervise(argv: List[str], env: dict, token: str, err: TextIO, grace: float,
               ranks: Optional[int] = None, tags: Optional[str] = None, watch: Optional[Watch] = None) -> Attempt:
    early: List[int] = []          # signals that came before the launcher existed
    launched: List[subprocess.Popen] = []
    # A chained job's stop signal is held until every rank's shim is up (its "ddlrun-up" line):
    # one that reached a shim still starting would kill it (the default action).
    stop_sig = stop_signum(env, STOP_SIGNAL_ENV) if ranks else None
    held: List[float] = []         # when a held stop signal came
    got: List[int] = []            # every signal that reached ddlrun

    def forward(sig: int) -> None:
        got.append(sig)
        if sig == stop_sig and (held or not relay_box or relay_box[0].not_up(ranks)):
            held.append(time.monotonic())
        elif launched:
            _signal_group(launched[0], sig)
        else:
            early.append(sig)
    relay_box: List[StderrRelay] = []
    handlers = _forward_signals(forward)
    try:
        proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, start_new_session=True,
                                stdout=subprocess.PIPE if tags else None, preexec_fn=TERM_ON_PARENT_DEATH)
    except OSError as e:
        _restore(handlers)
        err.write(f"ddlrun: error: cannot run {argv[0]}: {e.strerror}\n")
        return Attempt(127, StderrRelay(None, token))
    launched.append(proc)
    for sig in early:
        _signal_group(proc, sig)
    relay = StderrRelay(proc.stderr, token, tags=tags)
    relay.start()
    relay_box.append(relay)
    out_relay = StdoutRelay(proc.stdout, tags) if tags else None
    if out_relay is not None:
        out_relay.start()
    stopped_by: Optional[str] = None
    try:
        failed_at: Optional[float] = None
        stopped_at: Optional[float] = None
        stop_sent: Optional[float] = None
        while True:
            try:
                code = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if held:
                waiting = relay.not_up(ranks)
                if not waiting or now - held[0] > UP_WAIT_S:
                    if waiting:
                        _say(err, f"ddlrun: the stop signal waited {UP_WAIT_S:g} s for rank(s) {_names(waiting)} "
                                  "to start; passing it on now")
                    held.clear()
                    _signal_group(proc, stop_sig)
            if failed_at is None:
                first = relay.first_failure()
                if first is not None:
                    failed_at = now
                    _say(err, f"ddlrun: rank {first.rank} exited with status {first.code}; "
                              f"stopping the other ranks in {grace:g} s unless they finish")
                elif stopped_at is None and relay.first_stop() is not None:
                    stopped_at = now      # the others are saving's partners: they end at once
            if watch is not None and stop_sent is None and stopped_at is None and failed_at is None:
                stopped_by = watch(now, relay)
                if stopped_by:
                    _say(err, f"ddlrun: {stopped_by}; stopping the job (SIGTERM)")
                    _signal_group(proc, signal.SIGTERM)
                    stop_sent = now
            if failed_at is None and stopped_at is not None and stop_sent is None and now - stopped_at > grace:
                left = relay.still_running(ranks) if ranks else []
                _say(err, f"ddlrun: rank {relay.first_stop().rank} stopped for the walltime {grace:g} s ago; "
                          + (f"rank(s) {_names(left)} have not ended: " if left else "")
                          + "stopping the job (SIGTERM)")
                _signal_group(proc, signal.SIGTERM)
                stop_sent = now
            if failed_at is not None and stop_sent is None and now - failed_at > grace:
                _say(err, "ddlrun: stopping the job (SIGTERM)")
                _signal_group(proc, signal.SIGTERM)
                stop_sent = now
            if stop_sent is not None and now - stop_sent > KILL_AFTER_S:
                _say(err, "ddlrun: the job did not stop; killing it (SIGKILL)")
                _signal_group(proc, signal.SIGKILL)
                stop_sent = float("inf")
    finally:
        _restore(handlers)
    relay.join(timeout=RELAY_DRAIN_S)   # a straggling process may hold the pipe open: do not wait on it
    if out_relay is not None:
        out_relay.join(timeout=RELAY_DRAIN_S)
    if code < 0:
        code = 128 - code
    try:
        from ddl_runtime.horovod.shim import SHIM_DIR
        shim = str(SHIM_DIR) in env.get("PYTHONPATH", "")
    except ImportError:       # no hint rather than a wrong one
        shim = True
    status = final_status(relay, code, ranks, err, chained=bool(env.get(STOP_SIGNAL_ENV)), horovod_shim=shim)
    return Attempt(status, relay, stopped_by, tuple(got))


def final_status(relay: StderrRelay, code: int, ranks: Optional[int], err: TextIO,
                 chained: bool = False, horovod_shim: bool = True) -> int:
    """``_final_status``, and a hint when Open MPI refused to run as root."""
    status = _final_status(relay, code, ranks, err, chained, horovod_shim)
    if status != 0 and relay.openmpi_root:
        _say(err, "ddlrun: hint: that is Open MPI refusing to run as root (the system's MPI, found because the env "
                  "has none): install pip's MPICH into the env (pip install '.[mpi]': mpi4py and mpich), which "
                  "runs as root, or run as another user (Open MPI's own override: OMPI_ALLOW_RUN_AS_ROOT=1 "
                  "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)")
    return status


def _final_status(relay: StderrRelay, code: int, ranks: Optional[int], err: TextIO,
                  chained: bool = False, horovod_shim: bool = True) -> int:
    """ddlrun's exit status from the ranks' reports and the launcher's own status `code`.

    A rank that failed first decides it.  Else, once a rank exited EXIT_RESUME (the checkpoint
    was saved collectively before any rank could), the job stopped for the walltime when every
    rank said so, or when the launcher ended what was left: srun --kill-on-bad-exit SIGTERMs and
    then SIGKILLs a rank still in its exit, and the report that rank's shim writes as it ends may
    then never be forwarded (seen on the local Slurm: "task 0: Terminated", srun 143, one report).
    A stopped rank exits 0 to the launcher (rankexec), so in a chained job (`chained`: the chain's
    stop signal is set; the program may also stop on its own step budget) a launcher status 0 with
    a rank's report missing cannot tell a finished run from a stopped one: EXIT_RESUME then, since a
    chain that resumes a finished run only repeats its end, while one that takes a stopped run for
    finished loses the rest of the training.
    """
    first = relay.first_failure()
    if first is not None:
        _say(err, f"ddlrun: rank {first.rank} failed first, with exit status {first.code}")
        if relay.no_horovod and not horovod_shim:
            _say(err, "ddlrun: hint: a rank found no module named 'horovod': `ddlrun --horovod` (or WML_HOROVOD=1; "
                      "`wml submit --horovod`) runs a Horovod script unchanged on ddl_runtime's Horovod API")
        return first.code
    stopped = relay.resumable()
    missing = relay.still_running(ranks) if ranks else []
    if stopped and (code in (0, EXIT_RESUME) + LAUNCHER_KILLED or stopped == ranks):
        others = ""
        if missing and code in LAUNCHER_KILLED:
            others = f"; the launcher ended rank(s) {_names(missing)} as they exited (status {code})"
        elif missing:
            others = f"; rank(s) {_names(missing)} did not report"
        _say(err, f"ddlrun: {stopped} rank(s) checkpointed and stopped for the walltime "
                  f"(exit status {EXIT_RESUME}){others}: the next job of the chain resumes")
        return EXIT_RESUME
    if chained and code == 0 and missing:
        _say(err, f"ddlrun: a chained job's launcher exited 0, but rank(s) {_names(missing)} never "
                  f"reported how they ended: exiting {EXIT_RESUME}, so that the next job of the chain resumes "
                  "from the last checkpoint rather than taking the run as finished")
        return EXIT_RESUME
    return code


def _names(ranks: List[int]) -> str:
    return ", ".join(map(str, ranks))


def _say(err: TextIO, line: str) -> None:
    err.write(line + "\n")
    err.flush()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


def _forward_signals(fn: Callable[[int], None]) -> dict:
    old = {}
    for sig in FORWARDED:
        old[sig] = signal.signal(sig, lambda signum, _frame: fn(signum))
    return old


def _restore(handlers: dict) -> None:
    for sig, old in handlers.items():
        signal.signal(sig, old)
