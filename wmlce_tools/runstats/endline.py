"""The one line of a run's report that ddlrun prints as the ranks end (so the end of every job's
output, on every scheduler, says it) and that ``wml status`` shows."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, TextIO

from .analysis import analyse, one_line
from .records import STATS_DIR, load


def line_for(stats_dir: Path) -> Optional[str]:
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
        out.write(f"ddlrun: run report: {text} (wml report: the page)\n")
        out.flush()


def status_line(job_dir: str) -> Optional[str]:
    """``wml status``'s line for a job directory (None: no records)."""
    if not job_dir:
        return None
    try:
        return line_for(Path(job_dir) / STATS_DIR)
    except (OSError, ValueError):
        return None
