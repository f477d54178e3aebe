"""Schedulers, by name: each module knows its template, how to submit a script, how to read
the submit reply, and (for the job lifecycle) how to ask for status and cancel.  The site
profile's ``scheduler`` picks one; ``get_scheduler`` finds it in the one registry,
``wmlce_tools/plugins.py`` (wml's own by name, and those of packages installed beside wml:
the ``wml.schedulers`` entry points).  Importing this package imports no scheduler module.

A layer with `launchers` and `env`: also the job states every scheduler's states map to
(`states.py`), the passthrough directives in each scheduler's spelling (`passthrough.py`), the
one path that runs scheduler commands (`commands.py`) and the local site's runner
(`local_run.py`).  May import: `layout`, `site` and the foundation (`errors`, `walltime`,
`quoting`, ...).  Never `launchers`, `env` or anything above.
"""
from __future__ import annotations

import abc
from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, NamedTuple, Optional, Tuple

from ..errors import WmlError
from ..plugins import load, names as scheduler_names
from .commands import Controller, SchedulerError, SchedulerUnreachable, unreachable_hint  # noqa: F401
from .commands import run as run_command

if TYPE_CHECKING:  # the registry's state set; imported lazily so `wml render` stays light
    import subprocess

    from .states import JobState

#: what a status query learned: (state, exit code when the job has ended and it is known),
#: optionally followed by the scheduler's reason word (Slurm: ``DependencyNeverSatisfied``)
Status = Tuple["JobState", Optional[int]]
#: scheduler reasons that say a pending job will never start
NEVER_STARTS = {"DependencyNeverSatisfied": "the job it depends on did not complete successfully"}
#: ``parse(stdout, stderr, returncode)``; None: this source does not know the job (ask the next)
StatusParser = Callable[[str, str, int], Optional[Status]]

#: outcomes of a cancel request
CANCEL_REQUESTED = "requested"     # the scheduler accepted it (the job ends soon)
CANCEL_FINISHED = "finished"       # the job had already ended
CANCEL_UNKNOWN = "unknown"         # the scheduler does not know the job
#: in the job directory: wml asked for this job to be cancelled (the local site's runner acts on it)
CANCEL_MARK = "cancel-requested"


class StatusQuery(NamedTuple):
    """One command that may know a job's state, and how to read its reply."""

    argv: List[str]
    parse: StatusParser


def tool_failure(argv: List[str], stdout: str, stderr: str, returncode: int,
                 controller: Optional[Controller] = None) -> SchedulerError:
    text = stderr or stdout
    fatal = [ln for ln in text.splitlines() if "fatal" in ln.lower()]
    msg = " ".join((fatal[-1] if fatal else text).split())[:300] or f"exit status {returncode}"
    if "configuration source" in msg:
        msg += " (no Slurm configuration here: set SLURM_CONF; for scripts/local-slurm run eval \"$(scripts/local-slurm env)\")"
    else:
        msg += unreachable_hint(controller, text)
    return SchedulerError(f"{argv[0]} failed: {msg}")


class Scheduler(abc.ABC):
    """Base: what every scheduler module provides."""

    name: str = ""
    #: the job script's template: a file in wml's ``templates/``, or in ``template_dir`` (a
    #: plugin's own directory, searched first; its template may include wml's ``_body.sh.j2``)
    template: str = ""
    template_dir: Optional[str] = None
    #: the variable that holds the job's id inside the job (SLURM_JOB_ID)
    job_id_var: str = ""
    submit_tool: str = ""
    #: shown when ``submit_tool`` is not on PATH
    missing_hint: str = ""
    #: script passed on stdin (``bsub < script``) instead of as an argument
    submit_via_stdin: bool = False
    #: the server its commands talk to (how to probe it, its "busy" and "unreachable"
    #: replies); None: no server (the local site)
    controller: Optional[Controller] = None

    def run_command(self, argv: List[str], **kw) -> "subprocess.CompletedProcess[str]":
        """Run one of this scheduler's commands through the one common path
        (``schedulers.commands.run``): missing, hanging and unreachable reported in seconds."""
        return run_command(argv, self.controller, missing_hint=self.missing_hint, **kw)

    @abc.abstractmethod
    def submit_argv(self, script: Path) -> List[str]:
        """argv that submits ``script``."""

    @abc.abstractmethod
    def parse_submit(self, stdout: str) -> str:
        """The job id in the submit command's reply (WmlError when there is none)."""

    def interactive_argv(self, directives: List[str]) -> Optional[List[str]]:
        """Command for an interactive allocation with the same resources, or None."""
        return None

    @abc.abstractmethod
    def output_paths(self, jobdir: Path, job_name: str) -> Tuple[str, str]:
        """Default stdout/stderr paths as the scheduler's directive reads them."""

    def expand_output(self, pattern: str, job_id: str) -> str:
        """An output path pattern with this job's id filled in (to find the logs later)."""
        return pattern

    # -- job lifecycle ------------------------------------------------------------------
    #: commands that ask for status / cancel (checked on PATH before running them)
    status_tools: Tuple[str, ...] = ()

    def status_argv(self, job_id: str) -> List[str]:
        """The first command to ask for ``job_id``'s state."""
        return self.status_queries(job_id)[0].argv

    def parse_status(self, stdout: str, stderr: str = "", returncode: int = 0) -> Optional[Status]:
        """Reads ``status_argv``'s reply: (state, exit code or None), or None when that
        command does not know the job (finished and gone, or never existed).  A scheduler
        without status queries (the local site) never gets here and knows no job."""
        return None

    def status_queries(self, job_id: str) -> List[StatusQuery]:
        """Commands to ask, in order, until one knows the job (live queue first, then the
        scheduler's memory of finished jobs, then accounting)."""
        return []

    def status_from_files(self, output: str, error: str, jobdir: Optional[Path], job_id: str) -> Optional[Status]:
        """Final state read from what the scheduler writes into the job's files, for jobs
        the scheduler has forgotten (LSF's job report, Cobalt's .cobaltlog)."""
        return None

    def cancel_argv(self, job_id: str) -> List[str]:
        raise WmlError(f"the {self.name} scheduler has no cancel command")

    #: why a queued job cannot be kept off nodes (None: ``exclude_argv`` can)
    no_exclusion: Optional[str] = "this scheduler has no way to keep a queued job off a node"

    def exclude_argv(self, job_id: str, hosts: List[str]) -> Optional[List[str]]:
        """The command that keeps queued job ``job_id`` off ``hosts`` (every node to leave out, not
        only new ones): a chain's next segment after a node failed with no spare to replace it
        (``ddlrun --restarts``; chain/segment_end.py).  None where the scheduler has no such form."""
        return None

    def parse_cancel(self, stdout: str, stderr: str = "", returncode: int = 0) -> str:
        """CANCEL_REQUESTED, CANCEL_FINISHED or CANCEL_UNKNOWN; SchedulerError otherwise."""
        raise WmlError(f"the {self.name} scheduler has no cancel command")


def get_scheduler(name: str) -> Scheduler:
    """The scheduler ``name`` (wml's own or a plugin's); WmlError, one line, when there is none
    or a plugin's is not a Scheduler."""
    cls = load("scheduler", name)
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise WmlError(f"the scheduler plugin {name!r} names {cls!r}, not a subclass of "
                       f"wmlce_tools.schedulers.Scheduler")
    return cls()


def names() -> List[str]:
    return scheduler_names("scheduler")
