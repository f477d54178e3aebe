"""IBM Spectrum LSF (Summit): ``bsub < script``; reply ``Job <701106> is submitted to
default queue <batch>.``; ``bsub -Is`` for an interactive shell.  Directives as in the OLCF
Summit guide: ``#BSUB -P -W -nnodes -q -J -o -e -alloc_flags -w``."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import WmlError
from . import Scheduler, register

_REPLY = re.compile(r"Job <(\d+)> is submitted")


@register
class LSF(Scheduler):
    name = "lsf"
    template = "lsf.sh.j2"
    submit_tool = "bsub"
    missing_hint = "run this on a Summit login node, or use --dry-run"
    submit_via_stdin = True

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
