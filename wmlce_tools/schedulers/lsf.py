"""IBM Spectrum LSF (Summit): ``bsub < script``; reply ``Job <701106> is submitted to
default queue <batch>.``; ``bsub -Is`` for an interactive shell.  Directives as in the OLCF
Summit guide: ``#BSUB -P -W -nnodes -q -J -o -e -alloc_flags -w``.

Status: ``bjobs -noheader -o "stat exit_code" ID`` (``RUN -``, ``EXIT 3``; the plain ``bjobs``
table is read too); ``Job <ID> is not found`` once mbatchd has forgotten the job (after
CLEAN_PERIOD), and then the job report LSF appends to the output file (``Successfully
completed.`` / ``Exited with exit code 3.`` / ``TERM_OWNER: job killed by owner.`` /
``TERM_RUNLIMIT: ...``) says how it ended.  Cancel: ``bkill ID`` replies ``Job <ID> is being
terminated``."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import WmlError
from . import (CANCEL_FINISHED, CANCEL_REQUESTED, CANCEL_UNKNOWN, Controller, Scheduler, StatusQuery,
               tool_failure)

_REPLY = re.compile(r"Job <(\d+)> is submitted")
_NOT_FOUND = re.compile(r"Job <\d+(?:\[\d+\])?> is not found|No matching job found|No job found", re.I)
_BEING_KILLED = re.compile(r"Job <\d+> is being (?:terminated|signaled)", re.I)
_FINISHED = re.compile(r"Job has already finished|already finished", re.I)
_REPORT_EXIT = re.compile(r"^Exited with exit code (\d+)\.", re.M)
_REPORT_TERM = re.compile(r"^(TERM_[A-Z_]+):", re.M)

#: LSF job states (bjobs(1) "Job states") -> wml's state name
STATES = {
    "PEND": "PENDING", "PROV": "PENDING", "PSUSP": "PENDING", "WAIT": "PENDING",
    "RUN": "RUNNING", "USUSP": "RUNNING", "SSUSP": "RUNNING",
    "DONE": "COMPLETED", "EXIT": "FAILED",
    "ZOMBI": "FAILED",     # killed while its host was unreachable: it will not run on
    "UNKWN": "UNKNOWN",    # mbatchd lost contact with the host; may come back
}
#: TERM_* reasons of the job report that are not plain failures
TERM_STATES = {"TERM_OWNER": "CANCELLED", "TERM_ADMIN": "CANCELLED", "TERM_FORCE_OWNER": "CANCELLED",
               "TERM_FORCE_ADMIN": "CANCELLED", "TERM_REQUEUE_OWNER": "CANCELLED",
               "TERM_RUNLIMIT": "TIMEOUT", "TERM_DEADLINE": "TIMEOUT"}


#: mbatchd as LSF's b* commands see it: ``bparams`` asks mbatchd only.  LSF's clients keep
#: retrying an unreachable master ("batch system daemon not responding ... still trying",
#: "LSF is down. Please wait ..."); "LSF is processing your request" is a busy mbatchd.
CONTROLLER = Controller(
    name="the LSF master batch daemon (mbatchd)",
    probe=("bparams",),
    busy=re.compile(r"LSF is processing your request|mbatchd is busy|try again later", re.I),
    unreachable=re.compile(r"LSF is down|batch system daemon not responding|Cannot connect to LSF|LIM is down"
                           r"|Failed in an LSF library call", re.I),
    check="that LSF answers on this login node (lsid, bparams) and that LSF_ENVDIR names this cluster's lsf.conf",
)


def map_state(word: str):
    from .states import JobState

    return JobState[STATES.get(word.strip().upper(), "UNKNOWN")]


def _code(text: str):
    text = text.strip()
    return int(text) if text.isdigit() else None


class LSF(Scheduler):
    name = "lsf"
    template = "lsf.sh.j2"
    job_id_var = "LSB_JOBID"
    submit_tool = "bsub"
    missing_hint = "run this on a Summit login node, or use --dry-run"
    submit_via_stdin = True
    controller = CONTROLLER

    def submit_argv(self, script: Path):
        return ["bsub"]

    def parse_submit(self, stdout: str) -> str:
        m = _REPLY.search(stdout)
        if not m:
            raise WmlError(f"could not read a job id from bsub's reply: {stdout.strip()[:200]!r}")
        return m.group(1)

    def interactive_argv(self, directives):
        return ["bsub", "-Is", *directives, "$SHELL"]

    def output_paths(self, jobdir: Path, job_name: str):
        return str(jobdir / f"{job_name}.%J.out"), str(jobdir / f"{job_name}.%J.err")

    def expand_output(self, pattern: str, job_id: str) -> str:
        return pattern.replace("%J", job_id)

    # -- status -------------------------------------------------------------------------
    status_tools = ("bjobs",)

    def status_queries(self, job_id: str):
        return [StatusQuery(["bjobs", "-noheader", "-o", "stat exit_code", job_id], self.parse_status)]

    def parse_status(self, stdout: str, stderr: str = "", returncode: int = 0):
        """``STAT EXIT_CODE`` words (``-noheader -o "stat exit_code"``) or the default table
        (``JOBID USER STAT QUEUE ...``).  EXIT_CODE is ``-`` until the job exits non-zero."""
        from .states import JobState

        text = stdout + "\n" + stderr
        lines = [ln for ln in stdout.splitlines() if ln.strip() and not _NOT_FOUND.search(ln)]
        if not lines:
            if _NOT_FOUND.search(text) or "No unfinished job found" in text:
                return None
            if returncode != 0:
                raise tool_failure(["bjobs"], stdout, stderr, returncode, self.controller)
            return None
        words = lines[0].split()
        if words[0] == "JOBID":          # the default table: find the STAT column
            if len(lines) < 2:
                return None
            stat_at = words.index("STAT") if "STAT" in words else 2
            row = lines[1].split()
            return (map_state(row[stat_at]), None) if len(row) > stat_at else None
        state = map_state(words[0])
        code = _code(words[1]) if len(words) > 1 else None
        if state == JobState.COMPLETED:
            return state, 0
        if state == JobState.FAILED:
            return state, code
        return state, None

    def status_from_files(self, output, error, jobdir, job_id):
        """The job report LSF appends to the job's output file."""
        from pathlib import Path as _P

        for path in dict.fromkeys([output, error]):
            try:
                text = _P(path).read_text(errors="replace")[-20000:]
            except OSError:
                continue
            got = self.parse_job_report(text)
            if got is not None:
                return got
        return None

    def parse_job_report(self, text: str):
        from .states import JobState

        if "Successfully completed." in text:
            return JobState.COMPLETED, 0
        m = _REPORT_EXIT.search(text)
        if not m:
            return None
        code = int(m.group(1))
        term = _REPORT_TERM.findall(text)
        state = TERM_STATES.get(term[-1], "FAILED") if term else "FAILED"
        return JobState[state], code

    # -- cancel -------------------------------------------------------------------------
    def cancel_argv(self, job_id: str):
        return ["bkill", job_id]

    no_exclusion = None

    def exclude_argv(self, job_id: str, hosts):
        """bmod(1) ``-R "select[hname!='h1' && hname!='h2']"``: a pending job's resource requirement
        (the selection string's ``hname``, IBM Spectrum LSF 10.1 "Selection string"); it replaces the
        job's -R, which wml's LSF scripts give only with --rack-contiguous."""
        return ["bmod", "-R", "select[" + " && ".join(f"hname!='{h}'" for h in hosts) + "]", job_id]

    def parse_cancel(self, stdout: str, stderr: str = "", returncode: int = 0) -> str:
        text = stdout + "\n" + stderr
        if _BEING_KILLED.search(text):
            return CANCEL_REQUESTED
        if _FINISHED.search(text):
            return CANCEL_FINISHED
        if _NOT_FOUND.search(text):
            return CANCEL_UNKNOWN
        if returncode != 0:
            raise tool_failure(["bkill"], stdout, stderr, returncode, self.controller)
        return CANCEL_REQUESTED
