"""Cobalt (ALCF Theta): ``qsub script`` prints the job id; the script must be executable and
runs on a MOM node, so everything on compute nodes goes through aprun.  Directives as in
ALCF's Theta guide: ``#COBALT -n -t -q -A --attrs --jobname --dependencies``; ``-O prefix``
names ``prefix.output``, ``prefix.error`` and ``prefix.cobaltlog``.

Status: ``qstat -f ID`` (Cobalt's table: a header, a line of ``=``, one row per job, columns
left-aligned under their names; ``qstat -l`` prints ``Name: value`` lines instead, read too).
States: queued, starting, running, exiting, killing, user_hold, admin_hold, dep_hold,
dep_fail, maxrun_hold, ...  A finished job leaves the queue (qstat prints nothing and exits 1)
and its end is read from the ``.cobaltlog`` (``task completed normally with an exit code of
N``).  Cancel: ``qdel ID`` prints a ``Deleted Jobs`` table."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import WmlError
from . import (CANCEL_REQUESTED, CANCEL_UNKNOWN, Controller, Scheduler, StatusQuery, 
               tool_failure)

_LOG_EXIT = re.compile(r"task completed normally with an exit code of (-?\d+)")
_NOT_FOUND = re.compile(r"not found|no such job|unknown job", re.I)

#: Cobalt job states (``qstat`` State column) -> wml's state name
STATES = {
    "queued": "PENDING", "user_hold": "PENDING", "admin_hold": "PENDING", "dep_hold": "PENDING",
    "maxrun_hold": "PENDING", "dep_fail": "FAILED", "preempted": "PENDING", "hold": "PENDING",
    "starting": "RUNNING", "running": "RUNNING", "exiting": "RUNNING", "killing": "CANCELLED",
    "done": "COMPLETED",
}


#: Cobalt's queue manager as qsub/qstat/qdel see it; ``qstat -Q`` (the queues) is its cheap
#: question.  Its clients report a component they cannot reach as "failed to connect" /
#: "Connection refused" / ComponentLookupError.
CONTROLLER = Controller(
    name="the Cobalt queue manager",
    probe=("qstat", "-Q"),
    busy=re.compile(r"server busy|try again later", re.I),
    unreachable=re.compile(r"failed to connect|Connection refused|ComponentLookupError|cannot connect", re.I),
    check="that Cobalt answers on this login node (qstat -Q)",
)


def map_state(word: str):
    from .states import JobState

    return JobState[STATES.get(word.strip().lower(), "UNKNOWN")]


def _table_column(lines, name: str):
    """Values of column ``name`` in a Cobalt ``print_tabular`` table (left-aligned columns:
    each value starts where its header name starts)."""
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    if name not in names:
        return []
    i = names.index(name)
    lo, hi = starts[i], starts[i + 1] if i + 1 < len(starts) else None
    return [ln[lo:hi].strip() for ln in lines[1:] if not set(ln.strip()) <= {"="}]


class Cobalt(Scheduler):
    name = "cobalt"
    template = "cobalt.sh.j2"
    job_id_var = "COBALT_JOBID"
    submit_tool = "qsub"
    missing_hint = "run this on a Theta login node, or use --dry-run"
    controller = CONTROLLER

    def submit_argv(self, script: Path):
        return ["qsub", str(script)]

    def parse_submit(self, stdout: str) -> str:
        lines = [ln.strip() for ln in stdout.strip().splitlines() if ln.strip()]
        if lines and re.fullmatch(r"\d+", lines[-1]):
            return lines[-1]
        raise WmlError(f"could not read a job id from qsub's reply: {stdout.strip()[:200]!r}")

    def interactive_argv(self, directives):
        return ["qsub", "-I", *directives]

    def output_paths(self, jobdir: Path, job_name: str):
        prefix = jobdir / job_name
        return f"{prefix}.output", f"{prefix}.error"

    # -- status -------------------------------------------------------------------------
    status_tools = ("qstat",)

    def status_queries(self, job_id: str):
        return [StatusQuery(["qstat", "-f", job_id], self.parse_status)]

    def parse_status(self, stdout: str, stderr: str = "", returncode: int = 0):
        lines = [ln for ln in stdout.splitlines() if ln.strip()]
        if not lines:
            # qstat exits 1 with no output for a job that is not (or no longer) queued
            if returncode in (0, 1) and (not stderr.strip() or _NOT_FOUND.search(stderr)):
                return None
            raise tool_failure(["qstat"], stdout, stderr, returncode, self.controller)
        vertical = [re.match(r"^\s*(\w+)\s*:\s*(.*?)\s*$", ln) for ln in lines]
        if all(vertical):                       # qstat -l
            for m in vertical:
                if m.group(1) == "State":
                    return map_state(m.group(2)), None
            return None
        states = _table_column(lines, "State")
        return (map_state(states[0]), None) if states else None

    def status_from_files(self, output, error, jobdir, job_id):
        """``<prefix>.cobaltlog`` beside the output (``-O prefix``), else ``<jobid>.cobaltlog``
        in the job directory."""
        cands = []
        for path in (output, error):
            for suffix in (".output", ".error"):
                if path.endswith(suffix):
                    cands.append(Path(path[: -len(suffix)] + ".cobaltlog"))
        if jobdir is not None:
            cands += [Path(jobdir) / f"{job_id}.cobaltlog", *sorted(Path(jobdir).glob("*.cobaltlog"))]
        for path in dict.fromkeys(cands):
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            got = self.parse_cobaltlog(text)
            if got is not None:
                return got
        return None

    def parse_cobaltlog(self, text: str):
        from .states import JobState

        m = _LOG_EXIT.search(text)
        if m:
            code = int(m.group(1))
            if code < 0:                       # killed by signal -N
                code = 128 - code
            return (JobState.COMPLETED if code == 0 else JobState.FAILED), code
        return None

    # -- cancel -------------------------------------------------------------------------
    def cancel_argv(self, job_id: str):
        return ["qdel", job_id]

    #: ALCF's Cobalt (XC40): --attrs location= lists the nodes a job may use, none to avoid
    no_exclusion = ("Cobalt has no documented way to keep a job off a node (--attrs location= lists the nodes "
                    "to use, none to avoid); ask the centre to take the node out of service")

    def parse_cancel(self, stdout: str, stderr: str = "", returncode: int = 0) -> str:
        text = stdout + "\n" + stderr
        if "Deleted Jobs" in text:
            return CANCEL_REQUESTED
        if _NOT_FOUND.search(text):
            return CANCEL_UNKNOWN
        if returncode != 0:
            raise tool_failure(["qdel"], stdout, stderr, returncode, self.controller)
        return CANCEL_REQUESTED
