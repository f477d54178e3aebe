"""No scheduler: the job script runs now on this machine (``bash script``), its output
streamed to the terminal and kept in the job directory, run as a scheduler runs a job
(``local_run.py``: ended at its walltime, cancelled through its job directory).  The wml
process that runs it records it in the registry as it starts and as it ends."""
from __future__ import annotations

from pathlib import Path

from . import Scheduler


class Local(Scheduler):
    name = "local"
    template = "local.sh.j2"
    job_id_var = "WML_JOB_ID"
    submit_tool = "bash"
    missing_hint = "bash is needed to run job scripts"
    no_exclusion = "the local site's nodes are emulated on this machine: there is no other node to run on"

    def submit_argv(self, script: Path):
        return ["bash", str(script)]

    def parse_submit(self, stdout: str) -> str:  # the local job id is assigned by wml itself
        return stdout.strip()

    def output_paths(self, jobdir: Path, job_name: str):
        return str(jobdir / "output.log"), str(jobdir / "output.log")
