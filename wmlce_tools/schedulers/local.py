"""No scheduler: the job script runs now on this machine (``bash script``), its output
streamed to the terminal and kept in the job directory.  The job has ended by the time
``wml submit`` returns, so it is recorded with its final state: there is nothing to ask
for status and nothing to cancel."""
from __future__ import annotations

from pathlib import Path

from . import Scheduler, register


@register
class Local(Scheduler):
    name = "local"
    template = "local.sh.j2"
    submit_tool = "bash"
    missing_hint = "bash is needed to run job scripts"

    def submit_argv(self, script: Path):
        return ["bash", str(script)]

    def parse_submit(self, stdout: str) -> str:  # the local job id is assigned by wml itself
        return stdout.strip()

    def output_paths(self, jobdir: Path, job_name: str):
        return str(jobdir / "output.log"), str(jobdir / "output.log")
