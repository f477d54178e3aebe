"""Running a job script on this machine as a batch scheduler runs it (the ``local`` site).

The script runs in a session of its own, with no terminal input; the job's processes are that
session and the sessions its processes start (ddlrun's launcher), as a job's processes form one
cgroup under Slurm.  Its output is copied line by
line to the caller and to the job's log.  At the walltime every process of the job gets
SIGTERM, and SIGKILL ``KILL_WAIT_S`` seconds later (Slurm's ``KillWait``); a chain's stop
signal before the walltime is the job script's own timer (``templates/_body.sh.j2``).  When
the script ends, what it left running in its group is killed, as a scheduler cleans up a
finished job.  ``wml cancel`` asks for the same end by writing the job directory's
cancel mark, which the runner sees within half a second.

``job.pid`` in the job directory holds ``<pid of the wml process running it> <the job's
process group>``: ``wml status`` tells a job whose runner has gone from one still running.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from ..errors import WmlError
from ..walltime import env_seconds
from . import CANCEL_MARK

KILL_WAIT_S = 30.0          # SIGTERM at the walltime, SIGKILL this long after (Slurm's KillWait default)
KILL_WAIT_ENV = "WML_LOCAL_KILL_WAIT_S"
PID_FILE = "job.pid"
POLL_S = 0.5


@dataclass(frozen=True)
class LocalEnd:
    """How a local job ended: its exit status (128 + N when signal N ended it), and whether the
    runner ended it at its walltime or for ``wml cancel``."""

    exit_code: int
    timed_out: bool = False
    cancelled: bool = False


def kill_wait_s(env=os.environ) -> float:
    return env_seconds(env, KILL_WAIT_ENV, KILL_WAIT_S)


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    session: int
    zombie: bool


def _processes() -> List[_Proc]:
    """Every process on this machine, from /proc (empty where there is none)."""
    try:
        entries = os.listdir("/proc")
    except OSError:      # pragma: no cover - not Linux
        return []
    procs = []
    for pid in entries:
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()     # after "pid (comm) ": state ppid pgrp session
        if len(fields) > 3:
            procs.append(_Proc(int(pid), int(fields[1]), int(fields[3]), fields[0] == "Z"))
    return procs


class JobProcesses:
    """The job's processes: the sessions of the script and of everything it started (ddlrun
    puts its launcher and ranks in a session of their own), as a scheduler's cgroup holds
    every process of a job.  ``track()`` while the job runs, ``signal()`` and ``alive()`` at its end."""

    def __init__(self, root: int):
        self.root = root
        self.sessions = {root}

    def track(self) -> None:
        procs = _processes()
        children: Dict[int, List[_Proc]] = {}
        for p in procs:
            children.setdefault(p.ppid, []).append(p)
        todo = [self.root]
        while todo:
            for child in children.get(todo.pop(), ()):
                self.sessions.add(child.session)
                todo.append(child.pid)

    def _members(self) -> List[int]:
        return [p.pid for p in _processes() if p.session in self.sessions and not p.zombie and p.pid != os.getpid()]

    def alive(self) -> bool:
        return bool(self._members())

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.root, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in self._members():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def end_job(proc: subprocess.Popen, procs: JobProcesses, grace: float) -> int:
    """SIGTERM to every process of the job, SIGKILL to those left after ``grace`` seconds;
    returns the script's exit status."""
    procs.track()
    procs.signal(signal.SIGCONT)
    procs.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()
        if not procs.alive():
            break
        time.sleep(0.1)
    procs.signal(signal.SIGKILL)
    return proc.wait()


def exit_status(returncode: int) -> int:
    """The shell's convention: a process ended by signal N has status 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def run_script(argv: List[str], *, cwd: Path, env: Dict[str, str], jobdir: Path, log_path: Path,
               out: Callable[[str], None], walltime_s: Optional[int],
               on_walltime: Callable[[Callable[[str], None]], None]) -> LocalEnd:
    """Run the job script; ``on_walltime(say)`` is called when the walltime is reached, before
    the job's processes are signalled (``say`` writes a line to the output and the log)."""
    grace = kill_wait_s(env)
    with open(log_path, "w", buffering=1) as log:
        lock = threading.Lock()

        def say(line: str) -> None:
            with lock:
                log.write(line)
                out(line)

        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
        try:
            (jobdir / PID_FILE).write_text(f"{os.getpid()} {proc.pid}\n")
        except OSError:
            pass       # status then cannot tell a vanished runner; the job still runs

        def pump() -> None:
            assert proc.stdout is not None
            with proc.stdout:      # closed at its end (else a ResourceWarning when it is collected)
                for line in proc.stdout:
                    say(line)

        reader = threading.Thread(target=pump, name="wml-local-output", daemon=True)
        reader.start()
        procs = JobProcesses(proc.pid)
        deadline = time.monotonic() + walltime_s if walltime_s else None
        timed_out = cancelled = False
        try:
            while True:
                procs.track()
                try:
                    code = proc.wait(timeout=POLL_S)
                    procs.signal(signal.SIGKILL)    # what the script left behind
                    break
                except subprocess.TimeoutExpired:
                    pass
                if (jobdir / CANCEL_MARK).exists():
                    cancelled = True
                    say("wml: cancel requested (wml cancel): SIGTERM to every process of the job\n")
                    code = end_job(proc, procs, grace)
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    timed_out = True
                    on_walltime(say)
                    code = end_job(proc, procs, grace)
                    break
        except KeyboardInterrupt:
            end_job(proc, procs, grace)
            reader.join(timeout=5)
            raise WmlError(f"interrupted; job output so far is in {log_path}", exit_code=130) from None
        reader.join(timeout=5)     # a process that left the group may still hold the pipe
    return LocalEnd(exit_status(code), timed_out=timed_out, cancelled=cancelled)


def runner_gone(jobdir: Path) -> bool:
    """True when ``job.pid`` names a wml process that no longer runs (the job's end was never
    recorded); False when it runs or nothing says."""
    try:
        runner = int((jobdir / PID_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(runner, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
