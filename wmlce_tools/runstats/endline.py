"""The one line of a run's report that ddlrun prints as the ranks end (so the end of every job's
output, on every scheduler, says it), ending with the command that shows the whole report
(``wml report @N``), and that ``wml status`` shows."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, TextIO

from ..quoting import sh_quote

# <job dir>/wml-ref: "@N", the job's id in wml's registry, written there when wml records the job
# (jobs/lifecycle.py); the job script exports WML_JOB_DIR
REF_FILE = "wml-ref"
# else the scheduler's id of the job, which `wml report` takes too
JOB_ID_VARS = ("WML_JOB_ID", "SLURM_JOB_ID", "LSB_JOBID", "PBS_JOBID", "COBALT_JOBID")


def line_for(stats_dir: Path) -> Optional[str]:
    from .analysis import analyse, one_line      # numpy: only where there are records to read
    from .records import load

    recs = load(stats_dir)
    if recs is None or not recs.ranks:
        return None
    return one_line(analyse(recs))


def print_end_line(env: Mapping[str, str], out: TextIO) -> None:
    from ddl_runtime.core.jobenv import stats_dir

    where = stats_dir(env)
    if where is None:
        return
    try:
        text = line_for(Path(where))
    except Exception as e:  # noqa: BLE001 - the job's own exit status matters more than its summary
        text = f"cannot read the ranks' records in {where}: {type(e).__name__}: {e}"
    if text is not None:
        out.write(f"ddlrun: run report: {text} ({report_command(env, where)})\n")
        out.flush()


def report_command(env: Mapping[str, str], stats_dir: str) -> str:
    """The command that reports this job: ``wml report @N`` where wml recorded it, else with the
    scheduler's id of the job, else with the records' directory."""
    job_dir = env.get("WML_JOB_DIR")
    if job_dir:
        try:
            ref = (Path(job_dir) / REF_FILE).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            ref = ""
        if ref.startswith("@") and ref[1:].isdigit():
            return f"wml report {ref}"
    for var in JOB_ID_VARS:
        if env.get(var):
            return f"wml report {sh_quote(env[var])}"
    return f"wml report {sh_quote(stats_dir)}"


def status_line(job_dir: str) -> Optional[str]:
    """``wml status``'s line for a job directory (None: no records)."""
    if not job_dir:
        return None
    try:
        from .records import STATS_DIR

        return line_for(Path(job_dir) / STATS_DIR)
    except (OSError, ValueError):
        return None
