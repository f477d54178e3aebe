"""PBS Pro (ALCF Polaris and Aurora): ``qsub script`` prints the job id
(``123456.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov``); ``qsub -I`` for an interactive shell.
Directives as in ALCF's "Running Jobs" pages and PBS Pro's qsub(1B): ``#PBS -N -A -q``,
``-l select=N[:system=...]``, ``-l place=scatter``, ``-l walltime=HH:MM:SS``,
``-l filesystems=...``, ``-k doe`` (output written straight to its final path, so ``wml logs -f``
can follow it), ``-o -e``, ``-W depend=afterok:ID``.  The script starts in $HOME; wml's body
``cd``s to the submit directory.

Status: ``qstat -x -f -F json ID`` (``-x``: finished jobs too, for as long as the server keeps
history).  ``job_state``: Q queued, H held, W waiting for its start time, T moving, B array
begun, R running, E exiting, S/U suspended, M moved, X subjob done, F finished; a finished job
has ``Exit_status``: 0, the script's status, 256+N when it was killed by signal N, or a
negative ``JOB_EXEC_*`` code (-29: walltime exceeded).  An unknown job: ``qstat: Unknown Job
Id ID`` (exit 153).  Cancel: ``qdel ID`` (silent when it works; ``Unknown Job Id``; ``Job has
finished``)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List, Optional

from ..errors import WmlError
from ..walltime import hhmmss
from . import (CANCEL_FINISHED, CANCEL_REQUESTED, CANCEL_UNKNOWN, Controller, Scheduler, StatusQuery,
               tool_failure)

_REPLY = re.compile(r"^(\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.-]+)?)$")
_UNKNOWN = re.compile(r"Unknown Job Id", re.I)
_FINISHED = re.compile(r"Job has finished|Request invalid for state of job", re.I)

#: PBS job states (qstat(1B) "Job states") -> wml's state name; F is decided by Exit_status
STATES = {"Q": "PENDING", "H": "PENDING", "W": "PENDING", "T": "PENDING", "M": "PENDING",
          "B": "RUNNING", "R": "RUNNING", "E": "RUNNING", "S": "RUNNING", "U": "RUNNING",
          "X": "COMPLETED", "F": "COMPLETED"}
#: the PBS server as qsub/qstat/qdel see it; ``qstat -B`` (the server's own status) is its cheap
#: question.  Its clients say ``cannot connect to server HOST (errno=15010)`` /
#: ``Connection refused`` / ``pbs_connect`` failures when it is down.
CONTROLLER = Controller(
    name="the PBS server",
    probe=("qstat", "-B"),
    busy=re.compile(r"server busy|try again", re.I),
    unreachable=re.compile(r"cannot connect to server|Connection refused|pbs_connect|Communication failure", re.I),
    check="that the PBS server answers on this login node (qstat -B; PBS_SERVER or /etc/pbs.conf names it)",
)
#: negative Exit_status codes (PBS Pro job.h, JOB_EXEC_*) that mean a resource limit was hit
WALLTIME_CODES = {-29}


def resource_list(site, nodes: int, minutes: int, passed=None) -> List[str]:
    """The ``-l`` resources of a job: select, place, walltime, filesystems (``passed``: the
    Passthrough's chunk resources, --mem, and place, --exclusive)."""
    place = site.pbs.place
    if passed is not None and passed.pbs_place and passed.pbs_place not in place.split(":"):
        place = f"{place}:{passed.pbs_place}"
    select = [f"select={nodes}", *site.pbs.select, *(passed.pbs_select if passed is not None else ())]
    out = [":".join(select), f"place={place}", f"walltime={hhmmss(minutes)}"]
    if site.pbs.filesystems:
        out.append(f"filesystems={site.pbs.filesystems}")
    return out


def _seconds(text) -> Optional[int]:
    parts = str(text or "").split(":")
    if not parts or not all(p.isdigit() for p in parts):
        return None
    total = 0
    for p in parts:
        total = total * 60 + int(p)
    return total


def final_state(job: dict):
    """(JobState, exit code) of a finished job's record (``qstat -x -f -F json``)."""
    from .states import JobState

    code = job.get("Exit_status")
    if code is None:                       # deleted before it ran
        return JobState.CANCELLED, None
    code = int(code)
    if code == 0:
        return JobState.COMPLETED, 0
    if code in WALLTIME_CODES:
        return JobState.TIMEOUT, None
    if code > 256:                         # killed by signal code-256 (qdel, or walltime)
        used = _seconds((job.get("resources_used") or {}).get("walltime"))
        limit = _seconds((job.get("Resource_List") or {}).get("walltime"))
        state = JobState.TIMEOUT if used is not None and limit and used >= limit else JobState.CANCELLED
        return state, 128 + code - 256
    return JobState.FAILED, code if code > 0 else None


class PBS(Scheduler):
    name = "pbs"
    template = "pbs.sh.j2"
    job_id_var = "PBS_JOBID"
    submit_tool = "qsub"
    missing_hint = "run this on a login node of the PBS machine (Polaris, Aurora), or use --dry-run"
    controller = CONTROLLER

    def submit_argv(self, script: Path):
        return ["qsub", str(script)]

    def parse_submit(self, stdout: str) -> str:
        lines = [ln.strip() for ln in stdout.strip().splitlines() if ln.strip()]
        if lines and _REPLY.match(lines[-1]):
            return lines[-1]
        raise WmlError(f"could not read a job id from qsub's reply: {stdout.strip()[:200]!r}")

    def interactive_argv(self, directives):
        return ["qsub", "-I", *directives]

    def output_paths(self, jobdir: Path, job_name: str):
        return str(jobdir / f"{job_name}.out"), str(jobdir / f"{job_name}.err")

    # -- status -------------------------------------------------------------------------
    status_tools = ("qstat",)

    def status_queries(self, job_id: str):
        return [StatusQuery(["qstat", "-x", "-f", "-F", "json", job_id], self.parse_status)]

    def parse_status(self, stdout: str, stderr: str = "", returncode: int = 0):
        from .states import JobState

        if _UNKNOWN.search(stderr + stdout):
            return None
        if returncode != 0:
            raise tool_failure(["qstat"], stdout, stderr, returncode, self.controller)
        job = self._job_record(stdout)
        if job is None:
            return None
        word = str(job.get("job_state", "")).strip().upper()
        if word in ("F", "X"):
            return final_state(job)
        return JobState[STATES.get(word, "UNKNOWN")], None

    @staticmethod
    def _job_record(stdout: str) -> Optional[dict]:
        """The one job in ``qstat -f -F json``'s ``Jobs`` object.  Some PBS versions write
        control characters of Variable_List values unescaped, so the parse is not strict, and
        when even that fails the two fields wml needs are read from the text."""
        try:
            data = json.loads(stdout, strict=False)
        except ValueError:
            state = re.search(r'"job_state"\s*:\s*"(\w)"', stdout)
            if not state:
                return None
            code = re.search(r'"Exit_status"\s*:\s*(-?\d+)', stdout)
            return {"job_state": state.group(1), **({"Exit_status": int(code.group(1))} if code else {})}
        jobs = data.get("Jobs") if isinstance(data, dict) else None
        if not isinstance(jobs, dict) or not jobs:
            return None
        return next(iter(jobs.values()))

    # -- cancel -------------------------------------------------------------------------
    def cancel_argv(self, job_id: str):
        return ["qdel", job_id]

    #: PBS Pro's select names the hosts to use (host=...), none to avoid; OpenPBS's design of a
    #: per-job node filter was left unfinished
    no_exclusion = ("PBS Pro has no documented way to keep a job off a node (select's host= names the nodes to "
                    "use, none to avoid); ask the centre to take the node out of service")

    def parse_cancel(self, stdout: str, stderr: str = "", returncode: int = 0) -> str:
        text = stdout + "\n" + stderr
        if _FINISHED.search(text):
            return CANCEL_FINISHED
        if _UNKNOWN.search(text):
            return CANCEL_UNKNOWN
        if returncode != 0:
            raise tool_failure(["qdel"], stdout, stderr, returncode, self.controller)
        return CANCEL_REQUESTED
