"""The command-line side of a chain: ``wml submit --chain N`` (submit, say what was done,
``--wait``) and ``wml logs`` of a chained run (every segment's output, in order)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable, Optional, TextIO

import typer

from ..jobscript import JobPlan
from ..chain import record
from ..chain.spec import Chain


def submit_chain_cmd(plan: JobPlan, chain: Chain, out: Callable[[str], None], as_json: bool, wait: bool) -> int:
    """Returns the exit status ``wml submit`` ends with."""
    from ..runs.chain import submit_chain

    results = submit_chain(plan, chain, out=out)
    done = record.finished(chain.checkpoint_dir)
    step = record.latest_step(chain.checkpoint_dir)
    at = f" (last checkpoint: step {step})" if step is not None else ""
    if as_json:
        typer.echo(json.dumps({"run_id": chain.run_id, "run_dir": str(chain.run_dir),
                               "checkpoint_dir": str(chain.checkpoint_dir), "length": chain.length,
                               "finished": done if plan.site.scheduler == "local" else None,
                               "segments": [r.as_json() for r in results]}))
    if plan.site.scheduler == "local":
        last = results[-1].exit_code if results else 0
        if done:
            typer.echo(f"wml: run {chain.run_id} finished in segment {len(results)} of {chain.length}; "
                       f"output in {chain.run_dir}/segment-*/", err=True)
            return 0
        ran = f"{len(results)} of its {chain.length} segments" if len(results) < chain.length else \
            f"{chain.length} segment(s)"
        typer.echo(f"wml: run {chain.run_id} did not finish in {ran} (the last ended with "
                   f"exit status {last}){at}; continue it with --chain N --checkpoint-dir {chain.checkpoint_dir}",
                   err=True)
        return last or 1
    if not as_json:
        ids = " ".join(r.job_id for r in results)
        typer.echo(f"Submitted run {chain.run_id}: a chain of {chain.length} jobs to {plan.site.name} "
                   f"({plan.site.scheduler}), each after the one before: {ids}")
        typer.echo(f"  run directory {chain.run_dir}; checkpoints {chain.checkpoint_dir}; "
                   f"follow it with wml logs -f {results[0].job_id}")
    if wait:
        return wait_chain(results[0].job_id)
    return 0


def wait_chain(job_ref: str, out: TextIO = sys.stderr, timeout: Optional[float] = None) -> int:
    """Wait for every segment in turn until the run is finished or the chain has ended;
    0 when finished, else the last segment's exit status (1 when unknown).  ``job_ref``: a
    segment's scheduler id."""
    from ..jobs.lifecycle import wait_for
    from ..jobs.registry import Registry
    from ..runs.chain_view import chain_of

    reg = Registry()
    view = chain_of(reg.get(job_ref), reg)
    if view is None:
        return wait_for(reg.get(job_ref), out=out, timeout=timeout, registry=reg)
    code = 1
    for seg in view.segments:
        if seg.job is None:
            continue
        code = wait_for(seg.job, out=out, timeout=timeout, registry=reg)
        if record.finished(Path(view.rec.checkpoint_dir)):
            break
    view = chain_of(reg.get(job_ref), reg, refresh=False)
    for line in view.lines():
        out.write(line + "\n")
    return 0 if view.finished else (code or 1)


def chain_logs(view, follow: bool, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Every segment's output in order, a header before each; ``follow``: each segment until
    it ends, then the next, until the run is finished or the chain has ended."""
    from ..jobs.lifecycle import logs
    from ..errors import WmlError

    for seg in view.segments:
        if seg.job is None:
            continue
        out.write(f"==> segment {seg.index}/{view.rec.length}: job {seg.job.job_id} ({seg.state}) <==\n")
        out.flush()
        try:
            logs(seg.job, follow=follow, out=out, err=err)
        except WmlError as e:
            if follow:
                raise
            err.write(f"wml: {e}\n")
        if follow and record.finished(Path(view.rec.checkpoint_dir)):
            break
    return 0
