"""The job script's side of ``--stage-env``: whether a job stages, where, and its lines.

The script calls one command before any rank starts (``python -m wmlce_tools.stage job``),
takes the staged prefix it prints, and activates the environment from there; a function run
at exit (``stage end``) drops the job's use of the copies.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from wmlce_tools.errors import WmlError
from wmlce_tools.quoting import sh_join, sh_quote

from ..ddlrun.place import FROM_VAR, NODE_PREFIX_VAR, NODE_TOKEN

#: overrides the site profile's place (tests; a user's own node-local directory)
PLACE_VAR = "WML_STAGE_PLACE"


@dataclass(frozen=True)
class StagePlan:
    prefix: Path            # the shared environment
    place: str              # node-local directory ($VARS, {node} expanded on each node)
    auto: bool              # on failure: the shared environment, one warning line
    site: str
    nodes: int
    keep: bool = False      # a chain segment whose next segment reuses the copies

    def _common(self) -> List[str]:
        return ["--env", str(self.prefix), "--place", self.place, "--site", self.site, "--nodes", str(self.nodes)]

    def end_command(self, job_id_var: str) -> str:
        """The end of the job's use of the copies, as a shell line (the job id expanded by it)."""
        end = [sys.executable, "-m", "wmlce_tools.stage", "end", *self._common(), *(["--keep"] if self.keep else [])]
        return f'{sh_join(end)} --job "${{{job_id_var}:-$$}}"'

    def lines(self, job_id_var: str) -> List[str]:
        job = f'--job "${{{job_id_var}:-$$}}"'
        common = self._common()
        here = [sys.executable, "-m", "wmlce_tools.stage"]
        mode = "; on failure the shared env (one warning line)" if self.auto else ""
        out = [f"# Stage the env to node-local storage ({self.place}) on each node before any rank starts{mode};",
               "# the ranks run from the copy.  At exit: the copies no job uses are removed"
               + (" (kept: the next segment reuses them)." if self.keep else "."),
               f"wml_stage_end() {{ {self.end_command(job_id_var)} || true; }}",
               "trap wml_stage_end EXIT",
               f"wml_env_prefix=$({sh_join([*here, 'job', *common, *(['--auto'] if self.auto else [])])} {job})"]
        out.append(f"export {FROM_VAR}={sh_quote(str(self.prefix))}   # the ranks' PATH, LD_LIBRARY_PATH: the copy")
        if NODE_TOKEN in self.place:    # emulated nodes on one host: each rank takes its node's copy
            out.append(f'if [ "$wml_env_prefix" != {sh_quote(str(self.prefix))} ]; then '
                       f'export {NODE_PREFIX_VAR}={sh_quote(self.place)}/"${{wml_env_prefix##*/}}"; fi')
        return out


def plan_staging(site, request, prefix: Optional[Path], nodes: int) -> Optional[StagePlan]:
    """The job's staging (None: it runs from the shared environment)."""
    opts = site.stage_env
    mode = request.stage_env or (opts.default if opts is not None else "off")
    if mode == "off" or (request.stage_env is None and prefix is None):    # the site's default: jobs with --env
        return None
    if opts is None:
        raise WmlError(f"--stage-env: site {site.name} names no node-local storage (its profile has no stage_env)")
    if prefix is None:
        raise WmlError("--stage-env stages the environment of --env: give --env NAME")
    place = os.environ.get(PLACE_VAR) or opts.place
    if not (place.startswith("/") or place.startswith("$")):
        raise WmlError(f"${PLACE_VAR}={place!r}: give an absolute directory")
    return StagePlan(prefix=Path(prefix), place=place, auto=mode == "auto", site=site.name, nodes=nodes)
