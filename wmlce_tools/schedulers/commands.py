"""Running a scheduler's client commands (sbatch, squeue, scancel, bsub, bjobs, qsub, qstat, ...):
the one path every scheduler module uses, so that a server that is down, a command that hangs
and a command that is missing are reported the same way, in seconds, in one line.

Slurm's clients retry an unreachable slurmctld for about 9 s (sbatch) to 18 s (squeue) before
they say so; LSF's keep trying ("... still trying") for as long as LSB_NTRIES allows.  So a
command that has not answered after ``connect_s`` (3 s; ``WML_SCHEDULER_CONNECT_S``) is not
simply waited for: the scheduler's cheap server probe (``scontrol ping``, ``bparams``,
``qstat -Q``; at most ``PROBE_S``) decides.  When the probe fails or does not answer, the
command is stopped and the error names the command, what the probe said and what to check.
When the probe answers, the server is up and merely slow: wml says so on stderr and waits up
to the caller's long limit.  A command whose stderr says "busy, try again" (sbatch: "Slurm
temporarily unable to accept job, sleeping and retrying") gets the long wait without a probe,
and a query that *ended* with such an answer is asked again with backoff (``retry_busy``).

A scheduler module describes its server with a ``Controller`` and calls
``Scheduler.run_command`` (which calls ``run`` here)."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Callable, List, Optional, Sequence, TextIO, Union

from ..errors import WmlError

#: how long a command may stay silent before the server probe decides
CONNECT_S = 3.0
#: the probe's own limit
PROBE_S = 1.5
#: default long wait, for a server that answers but is slow or busy
LONG_WAIT_S = 120.0


class SchedulerError(WmlError):
    """The scheduler's command failed for a reason other than "no such job" (controller down,
    permission, ...): the message names the command and quotes its reply."""


class SchedulerUnreachable(SchedulerError):
    """The scheduler's server did not answer: the message names the command, what the probe
    said, and what to check."""


@dataclass(frozen=True)
class Controller:
    """A scheduler's server, as its client commands see it."""

    #: in messages: "the Slurm controller (slurmctld)"
    name: str
    #: a cheap command that only asks the server whether it is up
    probe: Sequence[str]
    #: replies that mean "the server is busy, try again later" (long wait allowed)
    busy: "re.Pattern[str]"
    #: replies that mean the server cannot be reached (the message gets ``check`` added)
    unreachable: "re.Pattern[str]"
    #: what to check, e.g. "that slurmctld is running and SLURM_CONF (...) names it";
    #: a callable is asked at the time of the error (it may read the environment)
    check: Union[str, Callable[[], str]]

    def what_to_check(self) -> str:
        return self.check() if callable(self.check) else self.check


def connect_seconds() -> float:
    raw = os.environ.get("WML_SCHEDULER_CONNECT_S", "")
    try:
        value = float(raw) if raw else CONNECT_S
    except ValueError:
        raise WmlError(f"WML_SCHEDULER_CONNECT_S={raw!r} is not a number of seconds") from None
    if not 0 < value <= 600:
        raise WmlError(f"WML_SCHEDULER_CONNECT_S={raw!r} must be between 0 and 600 seconds")
    return value


def _first_line(text: str, limit: int = 200) -> str:
    lines = [" ".join(ln.split()) for ln in text.splitlines() if ln.strip() and not set(ln.strip()) <= {"*"}]
    return lines[0][:limit] if lines else ""


def _matching_line(pattern: "re.Pattern[str]", text: str) -> str:
    for ln in text.splitlines():
        if pattern.search(ln):
            return " ".join(ln.split())[:200]
    return ""


class _Running:
    """A started command whose stdout and stderr are collected by two threads (so its stderr
    can be read while it runs, and a full pipe never blocks it)."""

    def __init__(self, argv: List[str], stdin, cwd, env):
        self.proc = subprocess.Popen(argv, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
                                     start_new_session=True)   # its own group: stopped whole
        self.out: List[bytes] = []
        self.err: List[bytes] = []
        self.readers = [threading.Thread(target=self._pump, args=(self.proc.stdout, self.out), daemon=True),
                        threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True)]
        for t in self.readers:
            t.start()

    @staticmethod
    def _pump(stream: IO[bytes], into: List[bytes]) -> None:
        with stream:        # closed at its end (else a ResourceWarning when it is collected)
            for chunk in iter(lambda: stream.read1(65536), b""):
                into.append(chunk)

    def stderr_text(self) -> str:
        return b"".join(self.err).decode(errors="replace")

    def wait(self, seconds: float) -> Optional[int]:
        try:
            return self.proc.wait(timeout=max(0.0, seconds))
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def result(self, argv: List[str]) -> subprocess.CompletedProcess:
        for t in self.readers:
            t.join(timeout=2)
        return subprocess.CompletedProcess(argv, self.proc.returncode, b"".join(self.out).decode(errors="replace"),
                                           self.stderr_text())


def probe(controller: Controller, timeout: float = PROBE_S) -> Optional[str]:
    """None when the server answered the probe; otherwise what went wrong, in a few words."""
    argv = list(controller.probe)
    if shutil.which(argv[0]) is None:
        return f"{argv[0]} is not installed"
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    except subprocess.TimeoutExpired:
        return f"`{' '.join(argv)}` did not answer within {timeout:g} s either"
    except OSError as e:
        return f"cannot run {argv[0]}: {e.strerror or e}"
    text = (proc.stdout or "") + "\n" + (proc.stderr or "")
    if proc.returncode == 0 and not controller.unreachable.search(text) and not re.search(r"\bDOWN\b", text):
        return None
    said = _matching_line(controller.unreachable, text) or _first_line(proc.stderr or proc.stdout) \
        or f"exit status {proc.returncode}"
    return f"`{' '.join(argv)}` says: {said}"


def run(argv: Sequence[str], controller: Optional[Controller], *, missing_hint: str = "",
        stdin=None, cwd=None, env=None, wait_s: float = LONG_WAIT_S, connect_s: Optional[float] = None,
        retry_busy: bool = False, context: str = "", progress: Optional[TextIO] = None) -> subprocess.CompletedProcess:
    """Run one scheduler command; returns its CompletedProcess (text) whatever its exit status,
    for the caller to read.  Raises WmlError when the command is missing, SchedulerUnreachable
    when the server does not answer, SchedulerError when even a live server did not answer
    within ``wait_s``.  ``context`` is appended to those messages (e.g. where the script is
    kept); ``stdin`` may be an open file (``bsub < script``)."""
    argv = [str(a) for a in argv]
    tool = argv[0]
    if shutil.which(tool, path=(env or os.environ).get("PATH")) is None:
        raise WmlError(f"{tool} not found" + (f": {missing_hint}" if missing_hint else ""))
    out = progress if progress is not None else sys.stderr
    tail = f"; {context}" if context else ""
    if connect_s is None:
        try:
            connect_s = connect_seconds()
        except WmlError as e:
            raise WmlError(f"{e}{tail}") from None
    start = time.monotonic()
    deadline = start + wait_s
    delay = 0.5
    while True:
        try:
            running = _Running(argv, stdin, cwd, env)
        except OSError as e:
            raise SchedulerError(f"cannot run {tool}: {e.strerror or e}{tail}") from None
        try:
            code = running.wait(connect_s)
            if code is None:
                busy = _matching_line(controller.busy, running.stderr_text()) if controller else ""
                if busy:
                    _say(out, f"{tool}: {controller.name} is busy ({busy}); waiting up to {wait_s:g} s")
                elif controller is not None:
                    why = probe(controller)
                    code = running.proc.poll()   # it may have answered while the probe ran
                    if code is None and why is not None:
                        running.stop()
                        raise SchedulerUnreachable(
                            f"{tool} did not answer within {connect_s:g} s and {controller.name} looks unreachable "
                            f"({why}); check {controller.what_to_check()}{tail}")
                    if code is None:
                        _say(out, f"{tool} has not answered after {connect_s:g} s; {controller.name} answers "
                                  f"`{' '.join(controller.probe)}`, so waiting up to {wait_s:g} s")
                else:
                    _say(out, f"{tool} has not answered after {connect_s:g} s; waiting up to {wait_s:g} s")
                if code is None:
                    code = running.wait(deadline - time.monotonic())
                if code is None:
                    running.stop()
                    busy = busy or (_matching_line(controller.busy, running.stderr_text()) if controller else "")
                    said = f" (last said: {busy})" if busy else ""
                    raise SchedulerError(f"{tool} did not answer within {wait_s:g} s{said}; try again later{tail}")
        except KeyboardInterrupt:
            running.stop()
            raise
        done = running.result(argv)
        if (retry_busy and controller is not None and done.returncode != 0
                and controller.busy.search(done.stderr + done.stdout) and time.monotonic() + delay < deadline):
            _say(out, f"{tool}: {controller.name} is busy "
                      f"({_matching_line(controller.busy, done.stderr + done.stdout)}); asking again in {delay:g} s")
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
            continue
        return done


def unreachable_hint(controller: Optional[Controller], text: str) -> str:
    """``; check ...`` when a finished command's reply says the server is unreachable."""
    if controller is not None and controller.unreachable.search(text):
        return f"; check {controller.what_to_check()}"
    return ""


def _say(out: TextIO, text: str) -> None:
    try:
        out.write(f"wml: {text}\n")
        out.flush()
    except (OSError, ValueError):
        pass
