"""Write a sweep's run directory and submit it: ``sweep.json`` and ``trials/`` appear whole
(made beside the final name, then renamed), then ``submit-<k>/`` through the one submit path
(``wmlce_tools.runs.submission``), and the job id goes into the record and the job registry.  A resume
adds ``submit-<k+1>`` for the trials that failed or never ran."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

from ..errors import WmlError
from ..sweeps import record
from .sweep_plan import SweepPlan


def new_run_dir(base: Path, name: str) -> Path:
    from .submission import new_jobdir

    return new_jobdir(base, name)


def write_run_dir(sp: SweepPlan, extra: Optional[dict] = None) -> None:
    """The run directory, whole: sweep.json, trials/ and ``extra`` (name -> bytes)."""
    final = sp.run_dir
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    except OSError as e:
        raise WmlError(f"cannot create the sweep's directory under {final.parent}: {e.strerror}") from None
    try:
        (tmp / "trials").mkdir()
        record.save(tmp, sp.record)
        for name, data in (extra or {}).items():
            (tmp / name).write_bytes(data)
        os.rename(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise WmlError(f"cannot create the sweep's directory {final}: {e.strerror}") from None


def submit_sweep(sp: SweepPlan, out: Callable[[str], None] = sys.stdout.write, new: bool = True):
    """Submit ``sp`` (``new``: write its run directory first).  Returns the SubmitResult; the
    job is recorded in the registry (the local site: while it runs)."""
    from .submission import submit

    if new:
        write_run_dir(sp)
    plan = sp.plan
    if plan.stage is not None:
        from ..stage.archive import ensure_archive

        ensure_archive(plan.stage.prefix)
    rec = record.require(sp.run_dir)

    if plan.site.scheduler == "local":      # the job runs now: its id is known before it starts
        from .submission import _local_job_id

        rec.job_ids.append(_local_job_id(plan))
        record.save(sp.run_dir, rec)
        return submit(plan, sp.script, out=out)
    result = submit(plan, sp.script, out=out)
    rec.job_ids.append(result.job_id)
    record.save(sp.run_dir, rec)
    from ..jobs.lifecycle import record_submission

    try:
        record_submission(result, plan)
    except WmlError as e:
        raise WmlError(f"sweep {rec.run_id} was submitted as job {result.job_id} but could not be recorded ({e})") from None
    return result
