"""What tests read out of a job: the DDLCHECK line every rank of tests/jobs/programs/ddl_check.py
prints (ddlrun prefixes each line with ``[rank] ``), and the launcher line a job script's
comment promises."""
from __future__ import annotations

import json
import re
import shlex
from typing import List

_DDLCHECK = re.compile(r"^\[(\d+)\] DDLCHECK (\{.*\})$")
_PROMISE = re.compile(r"^# ddlrun recomputes this layout inside the allocation and runs:\n#   (.*)$", re.M)


def ddlcheck_ranks(text: str) -> List[dict]:
    """Every rank's DDLCHECK record, sorted by rank; each record's rank is its line prefix's."""
    out = []
    for line in text.splitlines():
        m = _DDLCHECK.match(line)
        if m:
            rec = json.loads(m.group(2))
            assert rec["rank"] == int(m.group(1)), line
            out.append(rec)
    return sorted(out, key=lambda r: r["rank"])


def promised_launch(script: str) -> List[str]:
    """The launcher command line (argv) that the job script's comment says ddlrun will run."""
    m = _PROMISE.search(script)
    assert m, script
    return shlex.split(m.group(1))


def same_launch(real: List[str], promised: List[str]) -> bool:
    """Whether a launch that ran is the one the script promised: word for word, where a promised
    value that names a host variable (``$LD_LIBRARY_PATH``, left for the launch to expand) matches
    whatever that variable held there (its text before the variable must lead the real word)."""
    if len(real) != len(promised):
        return False
    for r, p in zip(real, promised):
        if "$" in p:
            head = p[:p.index("$")].rstrip(":")
            if not r.startswith(head):
                return False
        elif r != p:
            return False
    return True


def directives(script: str, prefix: str) -> List[str]:
    """The scheduler directive lines (``#SBATCH``, ``#PBS``, ...) of a job script."""
    return [ln for ln in script.splitlines() if ln.startswith(prefix)]


def render_job(site: str, program, **request):
    """(JobPlan, script) of ``program --epochs 3`` on ``site``, as the golden files are made:
    job directory /jobs/j1, working directory /work/proj."""
    from pathlib import Path

    from wmlce_tools.jobscript import plan_job, render_script
    from wmlce_tools.resources import ResourceRequest
    from wmlce_tools.site.registry import get_site

    plan = plan_job(get_site(site), ResourceRequest(**request), [str(program), "--epochs", "3"],
                    jobdir=Path("/jobs/j1"), workdir=Path("/work/proj"))
    return plan, render_script(plan)


def assert_golden(script: str, program, golden) -> None:
    """``script`` (normalized) is the golden file ``golden`` word for word.  To regenerate the
    golden files after an intended change: ``WML_REGENERATE_GOLDEN=1 pytest <the test>``, then
    read the diff (``git diff tests/``) before committing it."""
    import os

    if os.environ.get("WML_REGENERATE_GOLDEN") == "1":
        golden.write_text(normalize(script, program))
    assert normalize(script, program) == golden.read_text(), (
        f"rendered script differs from {golden}; if the change is intended, regenerate it "
        "(WML_REGENERATE_GOLDEN=1, see tests/helpers/job_output.py)")


def normalize(text: str, program) -> str:
    """A rendered script without machine-specific paths, as the golden files hold it: the
    program's tmp path, wml's own ddlrun (called by absolute path) and this interpreter (used
    for a .py program on sites that load no module or env)."""
    import sys
    from pathlib import Path

    ddlrun = str(Path(sys.executable).parent / "ddlrun")
    return (text.replace(str(program), "/work/proj/train.py").replace(ddlrun, "{ddlrun}")
            .replace(sys.executable, "{python}"))
