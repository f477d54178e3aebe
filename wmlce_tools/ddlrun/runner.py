"""Run a LaunchPlan: write the placement file, print the command, run the launcher, and
report the first failing rank.

The launcher runs in its own process group (so the whole job can be signalled at once) and
gets SIGTERM if ddlrun dies; SIGINT/SIGTERM/SIGHUP reaching ddlrun are passed on to it.
When every rank runs on this machine, each rank's shim writes its exit status into a
private directory: once a rank fails, the others get ``FAIL_GRACE_S`` seconds to finish (a
line says so; ``WML_DDLRUN_FAIL_GRACE_S`` changes it) before the job is stopped, so a rank
blocked in a collective with a dead peer cannot hang the job; ddlrun then exits with the
first failing rank's status.  On several hosts the launcher's own exit status is returned.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, TextIO

from ..quoting import sh_join
from .pdeathsig import TERM_ON_PARENT_DEATH
from .plan import LaunchPlan

FAIL_GRACE_S = 10.0
GRACE_VAR = "WML_DDLRUN_FAIL_GRACE_S"
KILL_AFTER_S = 10.0
POLL_S = 0.2


@dataclass(frozen=True)
class RankExit:
    rank: int
    code: int
    time_ns: int


def read_statuses(status_dir: str) -> List[RankExit]:
    out = []
    try:
        names = os.listdir(status_dir)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(status_dir, name)) as f:
                code, t = f.read().split()
            out.append(RankExit(int(name), int(code), int(t)))
        except (OSError, ValueError):
            continue
    return out


def first_failure(statuses: List[RankExit]) -> Optional[RankExit]:
    failed = [s for s in statuses if s.code != 0]
    return min(failed, key=lambda s: (s.time_ns, s.rank)) if failed else None


def dry_run_text(plan: LaunchPlan) -> str:
    placeholder = os.path.join(tempfile.gettempdir(), "ddlrun-XXXX", _placement_name(plan))
    argv = plan.command(rankfile_path=placeholder if plan.placement else None)
    lines = [sh_join(argv)]
    if plan.placement:
        lines.append(f"# {placeholder}:")
        lines += [f"#   {line}" for line in plan.placement.splitlines()]
    return "\n".join(lines) + "\n"


def _placement_name(plan: LaunchPlan) -> str:
    return "erf" if plan.site.launcher == "jsrun" else "rankfile"


def run(plan: LaunchPlan, err: TextIO = sys.stderr) -> int:
    grace = fail_grace_s()
    workdir = tempfile.mkdtemp(prefix="ddlrun-")
    try:
        rankfile = None
        if plan.placement:
            rankfile = os.path.join(workdir, _placement_name(plan))
            with open(rankfile, "w") as f:
                f.write(plan.placement)
        status_dir = os.path.join(workdir, "status") if plan.all_local else None
        if status_dir:
            os.mkdir(status_dir)
        argv = plan.command(rankfile_path=rankfile, status_dir=status_dir)
        err.write(f"ddlrun: {sh_join(argv)}\n")
        err.flush()
        return _supervise(argv, plan.launcher_env(os.environ), status_dir, err, grace)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def fail_grace_s(env=os.environ) -> float:
    from ..errors import WmlError

    text = env.get(GRACE_VAR)
    if not text:
        return FAIL_GRACE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise WmlError(f"{GRACE_VAR}={text!r} must be a number of seconds >= 0")
    return value


def _supervise(argv: List[str], env: dict, status_dir: Optional[str], err: TextIO, grace: float) -> int:
    try:
        proc = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=TERM_ON_PARENT_DEATH)
    except OSError as e:
        err.write(f"ddlrun: error: cannot run {argv[0]}: {e.strerror}\n")
        return 127
    handlers = _forward_signals(lambda sig: _signal_group(proc, sig))
    try:
        failed_at: Optional[float] = None
        stop_sent: Optional[float] = None
        while True:
            try:
                code = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if status_dir and failed_at is None:
                first = first_failure(read_statuses(status_dir))
                if first is not None:
                    failed_at = now
                    err.write(f"ddlrun: rank {first.rank} exited with status {first.code}; "
                              f"stopping the other ranks in {grace:g} s unless they finish\n")
                    err.flush()
            if failed_at is not None and stop_sent is None and now - failed_at > grace:
                err.write("ddlrun: stopping the job (SIGTERM)\n")
                err.flush()
                _signal_group(proc, signal.SIGTERM)
                stop_sent = now
            if stop_sent is not None and now - stop_sent > KILL_AFTER_S:
                err.write("ddlrun: the job did not stop; killing it (SIGKILL)\n")
                err.flush()
                _signal_group(proc, signal.SIGKILL)
                stop_sent = float("inf")
    finally:
        for sig, old in handlers.items():
            signal.signal(sig, old)
    if code < 0:
        code = 128 - code
    if status_dir:
        first = first_failure(read_statuses(status_dir))
        if first is not None:
            err.write(f"ddlrun: rank {first.rank} failed first, with exit status {first.code}\n")
            return first.code
    return code


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _forward_signals(fn: Callable[[int], None]) -> dict:
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        old[sig] = signal.signal(sig, lambda signum, _frame: fn(signum))
    return old
