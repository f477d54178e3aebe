"""Submitting a chain: every segment's job directory under the run's directory, each segment
depending on the previous one (afterany), ids recorded in chain.json as they come; on the
local site the segments run one after another here."""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, List, Optional

from ddl_runtime.checkpoint.protocol import (CHAIN_LENGTH_ENV, CHECKPOINT_DIR_ENV, RUN_ID_ENV, SEGMENT_ENV,
                                             STOP_SIGNAL_ENV)

from ..errors import WmlError
from ..jobscript import JobPlan, render_script
from ..chain import record
from ..chain.spec import CHECKPOINT_SUBDIR, Chain, Segment, check_checkpoint_dir, check_margin, margin_seconds


def plan_chain(plan: JobPlan, run_dir: Path, length: int, checkpoint_dir: Optional[str],
               margin: Optional[str], walltime_s: Optional[int]) -> Chain:
    """The chain for ``plan`` (planned with its jobdir inside ``run_dir``), checked: the
    margin shorter than the walltime, the checkpoint directory writable.  ``walltime_s``: -t
    to the second (the local site's timer counts it; batch jobs get the scheduler's limit)."""
    site = plan.site
    if site.scheduler == "local":
        if walltime_s is None:
            raise WmlError("--chain on the local site needs -t: the walltime its own timer emulates (e.g. -t 10:00 or -t 30s)")
        wall_s, shown = walltime_s, f"{walltime_s} s"
    else:
        wall_s = (plan.walltime or 0) * 60
        from ..walltime import hhmm

        shown = hhmm(plan.walltime or 0)
    margin_s = margin_seconds(margin, site.chain.signal_margin)
    check_margin(margin_s, wall_s, shown)
    ckpt = Path(checkpoint_dir).expanduser() if checkpoint_dir else run_dir / CHECKPOINT_SUBDIR
    ckpt = Path(os.path.abspath(ckpt))
    check_checkpoint_dir(ckpt)
    return Chain(length=length, run_dir=run_dir, checkpoint_dir=ckpt, margin_s=margin_s, walltime_s=wall_s)


def segment_plan(plan: JobPlan, chain: Chain, index: int, previous: Optional[str] = None,
                 logs_dir: Optional[Path] = None) -> JobPlan:
    """Segment ``index`` of ``chain``: its own job directory and output, the contract's
    variables exported to every rank.  ``logs_dir``: the scheduler's output files go there
    instead (``wml render``: a directory that exists when the printed script is submitted;
    the segment's directory exists only when ``wml submit`` makes it)."""
    jobdir = chain.segment_dir(index) if logs_dir is None else logs_dir
    out, err = plan.scheduler.output_paths(jobdir, plan.request.job_name)
    output = plan.request.output or out
    error = plan.request.error or (plan.request.output if plan.request.output else err)
    contract = ((CHECKPOINT_DIR_ENV, str(chain.checkpoint_dir)), (STOP_SIGNAL_ENV, chain.signal),
                (SEGMENT_ENV, str(index)), (CHAIN_LENGTH_ENV, str(chain.length)), (RUN_ID_ENV, chain.run_id))
    seg = plan.with_job_vars(contract)
    return replace(seg, jobdir=jobdir, output=output, error=error, segment=Segment(chain, index, previous),
                   launch=replace(seg.launch, record_dir=str(jobdir)))


def _start_run(plan: JobPlan, chain: Chain) -> record.ChainRecord:
    try:
        chain.run_dir.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(chain.run_dir)
        chain.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise WmlError(f"{chain.run_dir} already exists (another wml submit in the same second?); "
                       "submit again") from None
    except OSError as e:
        raise WmlError(f"cannot create the run directory {chain.run_dir}: {e.strerror}") from None
    rec = record.ChainRecord(run_id=chain.run_id, site=plan.site.name, scheduler=plan.site.scheduler,
                             length=chain.length, checkpoint_dir=str(chain.checkpoint_dir), margin_s=chain.margin_s,
                             segments=[record.SegmentEntry(i, str(chain.segment_dir(i)))
                                       for i in range(1, chain.length + 1)])
    record.save(chain.run_dir, rec)
    return rec


def submit_chain(plan: JobPlan, chain: Chain, out: Callable[[str], None] = sys.stdout.write) -> List:
    """Submit (or, on the local site, run) the segments; returns their SubmitResults, each
    already recorded in the job registry."""
    from ..jobs.lifecycle import record_submission
    from .submission import submit

    if plan.site.scheduler != "local":     # a missing sbatch/bsub/qsub: no run directory left behind
        from .submission import check_tool, submit_command

        check_tool(plan.scheduler, submit_command(plan)[0])
    rec = _start_run(plan, chain)
    results, previous = [], None
    local = plan.site.scheduler == "local"
    for index in range(1, chain.length + 1):
        seg = segment_plan(plan, chain, index, previous)
        step_at_start = record.latest_step(chain.checkpoint_dir)
        try:
            result = submit(seg, render_script(seg), out=out)
        except WmlError as e:
            if not results:
                raise
            ids = " ".join(r.job_id for r in results)
            raise WmlError(f"segment {index} of {chain.length} was not submitted ({e}); segments already "
                           f"queued: {ids} (wml cancel ID each, or let them run)") from None
        rec.segments[index - 1].job_id = result.job_id
        record.save(chain.run_dir, rec)
        record_submission(result, seg)
        results.append(result)
        previous = result.job_id
        if local and record.finished(chain.checkpoint_dir):
            break      # the local site's "cancel the rest": the segments not yet run never start
        if local and _cut_short(chain, index, step_at_start, out):
            break
    return results


def _cut_short(chain: Chain, index: int, step_at_start: Optional[int], out: Callable[[str], None]) -> bool:
    """After a local segment: a save its walltime cut short (said when the walltime came) is set
    aside; True when the segment made no progress, so the chain stops rather than loop."""
    from ..chain.overrun import cut_save, made_progress, set_aside, stop_line

    cut = cut_save(chain.checkpoint_dir)
    if cut is None:
        return False
    set_aside(chain.checkpoint_dir, chain.segment_dir(index))
    if made_progress(cut, step_at_start) or index == chain.length:
        return False
    out(f"wml: {stop_line(index, chain.length, cut, chain.checkpoint_dir, chain.margin_s)}\n")
    return True
