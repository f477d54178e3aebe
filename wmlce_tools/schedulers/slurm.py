"""Slurm: ``sbatch --parsable script`` prints ``<id>[;cluster]``; a plain ``sbatch`` replies
``Submitted batch job <id>``; ``salloc`` for an interactive allocation.  Directives as in
sbatch(1).

Status, in order: ``squeue -h -j ID -o %T|%r`` (queued and running jobs with the reason they
wait; a finished job gives
no line, a forgotten one ``Invalid job id specified``), then ``scontrol show job -o ID``
(JobState and ExitCode of jobs that ended less than MinJobAge ago), then ``sacct`` (slurmdbd
accounting) or, where accounting storage is disabled, ``sacct -c`` (the jobcomp/filetxt
completion file).  ExitCode is ``<status>:<signal>``; a signal N reads as exit code 128+N.
Cancel: ``scancel ID`` (silent on success)."""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import WmlError
from . import (CANCEL_FINISHED, CANCEL_REQUESTED, CANCEL_UNKNOWN, Controller, Scheduler, StatusQuery,
               tool_failure)

_REPLY = re.compile(r"(?:Submitted batch job\s+)?(\d+)(?:;\S+)?\s*$")
_INVALID_JOB = re.compile(r"Invalid job id", re.I)
_NO_ACCOUNTING = re.compile(r"accounting storage is disabled|slurmdbd|accounting_storage/none", re.I)
_ALREADY_DONE = re.compile(r"already completing or completed|job has already finished", re.I)
_EXIT = re.compile(r"^(\d+):(\d+)$")

#: every Slurm job state (squeue(1) "JOB STATE CODES") -> wml's state name
STATES = {
    "PENDING": "PENDING", "CONFIGURING": "PENDING", "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING",
    "REQUEUE_FED": "PENDING", "RESV_DEL_HOLD": "PENDING", "SPECIAL_EXIT": "PENDING",
    "RUNNING": "RUNNING", "COMPLETING": "RUNNING", "STAGE_OUT": "RUNNING", "SIGNALING": "RUNNING",
    "RESIZING": "RUNNING", "SUSPENDED": "RUNNING", "STOPPED": "RUNNING", "POWER_UP_NODE": "PENDING",
    "UPDATE_DB": "RUNNING",
    "COMPLETED": "COMPLETED",
    "FAILED": "FAILED", "NODE_FAIL": "FAILED", "BOOT_FAIL": "FAILED", "OUT_OF_MEMORY": "FAILED",
    "PREEMPTED": "FAILED", "REVOKED": "FAILED",
    "CANCELLED": "CANCELLED",
    "TIMEOUT": "TIMEOUT", "DEADLINE": "TIMEOUT",
}


def _check_slurm() -> str:
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    return f"that slurmctld is running (scontrol ping) and that SLURM_CONF ({conf}) names its host and port"


#: slurmctld as its clients see it.  sbatch says "Slurm temporarily unable to accept job,
#: sleeping and retrying" when it is busy; "Socket timed out on send/recv operation" is an
#: overloaded controller (both: wait longer).  An unreachable one: "Unable to contact slurm
#: controller (connect failure)" after ~9 s of retries; ``scontrol ping`` says DOWN at once.
CONTROLLER = Controller(
    name="the Slurm controller (slurmctld)",
    probe=("scontrol", "ping"),
    busy=re.compile(r"temporarily unable to accept job|sleeping and retrying|Socket timed out on send/recv"
                    r"|Resource temporarily unavailable", re.I),
    unreachable=re.compile(r"Unable to contact slurm controller|connect failure|Connection refused"
                           r"|Slurmctld\(\w+\) at \S+ is DOWN", re.I),
    check=_check_slurm,
)


def map_state(text: str):
    """A Slurm state word (``CANCELLED by 0``, ``COMPLETED+`` allowed) -> JobState."""
    from .states import JobState

    word = text.strip().split()[0].rstrip("+").upper() if text.strip() else ""
    return JobState[STATES[word]] if word in STATES else JobState.UNKNOWN


def parse_exit_code(text: str):
    """``3:0`` -> 3; ``0:11`` (killed by signal 11) -> 139; anything else -> None."""
    m = _EXIT.match(text.strip())
    if not m:
        return None
    status, signal = int(m.group(1)), int(m.group(2))
    return 128 + signal if status == 0 and signal else status


def _final(state, code):
    from .states import JobState

    if state in (JobState.PENDING, JobState.RUNNING, JobState.UNKNOWN):
        return state, None
    return state, code


class Slurm(Scheduler):
    name = "slurm"
    template = "slurm.sh.j2"
    job_id_var = "SLURM_JOB_ID"
    submit_tool = "sbatch"
    missing_hint = "run this on a login node of the Slurm cluster, or use --dry-run"
    controller = CONTROLLER

    def submit_argv(self, script: Path):
        return ["sbatch", "--parsable", str(script)]

    def parse_submit(self, stdout: str) -> str:
        lines = [ln.strip() for ln in stdout.strip().splitlines() if ln.strip()]
        m = _REPLY.search(lines[-1]) if lines else None
        if not m:
            raise WmlError(f"could not read a job id from sbatch's reply: {stdout.strip()[:200]!r}")
        return m.group(1)

    def interactive_argv(self, directives):
        return ["salloc", *directives]

    def output_paths(self, jobdir: Path, job_name: str):
        return str(jobdir / f"{job_name}.%j.out"), str(jobdir / f"{job_name}.%j.err")

    def expand_output(self, pattern: str, job_id: str) -> str:
        return pattern.replace("%j", job_id)

    # -- status -------------------------------------------------------------------------
    status_tools = ("squeue", "scontrol", "sacct")

    def status_queries(self, job_id: str):
        return [
            StatusQuery(["squeue", "-h", "-j", job_id, "-o", "%T|%r"], self.parse_status),
            StatusQuery(["scontrol", "show", "job", "-o", job_id], self.parse_scontrol),
            StatusQuery(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode"],
                        self._sacct_parser(job_id)),
            # the completion file: only where there is no accounting, and it may not exist
            StatusQuery(["sacct", "-c", "-n", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"],
                        self._sacct_parser(job_id, tolerant=True)),
        ]

    def parse_status(self, stdout: str, stderr: str = "", returncode: int = 0):
        """``squeue -h -j ID -o %T|%r``: ``STATE|REASON`` while the job is queued or running
        (``PENDING|Dependency``, ``RUNNING|None``); the reason comes back as the third item
        when there is one (``DependencyNeverSatisfied``: the job can never start)."""
        if returncode != 0:
            if _INVALID_JOB.search(stderr + stdout):
                return None
            raise tool_failure(["squeue"], stdout, stderr, returncode, self.controller)
        lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
        if not lines:
            return None   # finished: squeue shows only live jobs
        state, _, reason = lines[0].partition("|")
        reason = reason.strip()
        if reason and reason not in ("None", "(null)"):
            return map_state(state), None, reason
        return map_state(state), None

    def parse_scontrol(self, stdout: str, stderr: str = "", returncode: int = 0):
        """``scontrol show job -o ID``: ``JobState=FAILED ... ExitCode=3:0 ...``."""
        if returncode != 0:
            if _INVALID_JOB.search(stderr + stdout):
                return None
            raise tool_failure(["scontrol"], stdout, stderr, returncode, self.controller)
        fields = {}
        for tok in stdout.split():
            k, sep, v = tok.partition("=")
            if sep and k not in fields:
                fields[k] = v
        if "JobState" not in fields:
            return None
        return _final(map_state(fields["JobState"]), parse_exit_code(fields.get("ExitCode", "")))

    def parse_sacct(self, stdout: str, stderr: str = "", returncode: int = 0, job_id: str = ""):
        """``sacct [-c] -n -P [-X] -j ID -o JobID,State,ExitCode``: ``ID|FAILED|3:0``; the
        allocation's line (JobID without a step suffix) when there are several."""
        if returncode != 0:
            if _NO_ACCOUNTING.search(stderr + stdout) or _INVALID_JOB.search(stderr + stdout):
                return None
            raise tool_failure(["sacct"], stdout, stderr, returncode, self.controller)
        rows = [ln.split("|") for ln in stdout.splitlines() if ln.count("|") >= 2]
        if job_id:
            rows = [r for r in rows if r[0].strip() == job_id] or rows
        rows = [r for r in rows if "." not in r[0]] or rows
        if not rows:
            return None
        # a requeued job has several records: the last one is the latest
        row = rows[-1]
        return _final(map_state(row[1]), parse_exit_code(row[2]))

    def _sacct_parser(self, job_id: str, tolerant: bool = False):
        def parse(out: str, err: str = "", rc: int = 0):
            if tolerant and rc != 0:
                return None
            return self.parse_sacct(out, err, rc, job_id=job_id)
        return parse

    # -- cancel -------------------------------------------------------------------------
    def cancel_argv(self, job_id: str):
        return ["scancel", job_id]

    no_exclusion = None

    def exclude_argv(self, job_id: str, hosts):
        """scontrol(1) ``update JobId=... ExcNodeList=<nodes>``: a pending job's excluded nodes
        (sbatch --exclude's list), replaced whole."""
        return ["scontrol", "update", f"JobId={job_id}", f"ExcNodeList={','.join(hosts)}"]

    def parse_cancel(self, stdout: str, stderr: str = "", returncode: int = 0) -> str:
        """scancel is silent when it sends the signal (and, in recent versions, also for a job
        that has already ended); it says ``Invalid job id specified`` for one it never knew
        or has forgotten."""
        text = stderr + stdout
        if _ALREADY_DONE.search(text):
            return CANCEL_FINISHED
        if _INVALID_JOB.search(text):
            return CANCEL_UNKNOWN
        if returncode != 0:
            raise tool_failure(["scancel"], stdout, stderr, returncode, self.controller)
        return CANCEL_REQUESTED
