"""Slurm: ``sbatch --parsable script`` prints ``<id>[;cluster]``; a plain ``sbatch`` replies
``Submitted batch job <id>``; ``salloc`` for an interactive allocation.  Directives as in
sbatch(1)."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import WmlError
from . import Scheduler, register

_REPLY = re.compile(r"(?:Submitted batch job\s+)?(\d+)(?:;\S+)?\s*$")


@register
class Slurm(Scheduler):
    name = "slurm"
    template = "slurm.sh.j2"
    submit_tool = "sbatch"
    missing_hint = "run this on a login node of the Slurm cluster, or use --dry-run"

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
