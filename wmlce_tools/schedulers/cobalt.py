"""Cobalt (ALCF Theta): ``qsub script`` prints the job id; the script must be executable and
runs on a MOM node, so everything on compute nodes goes through aprun.  Directives as in
ALCF's Theta guide: ``#COBALT -n -t -q -A --attrs --jobname --dependencies``; ``-O prefix``
names ``prefix.output``, ``prefix.error`` and ``prefix.cobaltlog``."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import WmlError
from . import Scheduler, register


@register
class Cobalt(Scheduler):
    name = "cobalt"
    template = "cobalt.sh.j2"
    submit_tool = "qsub"
    missing_hint = "run this on a Theta login node, or use --dry-run"

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
