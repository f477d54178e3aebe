"""Write a job directory, submit the script, read the job id back.

The job directory appears whole or not at all (written beside its final name and renamed),
and a script the scheduler refused is kept there so the user can read it.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from ..errors import WmlError
from ..jobscript import JobPlan
from ..quoting import sh_join

SUBMIT_TIMEOUT_S = 120


@dataclass(frozen=True)
class SubmitResult:
    job_id: str
    site: str
    scheduler: str
    script: Path
    submit_command: str
    jobdir: Path
    output: str
    error: str
    exit_code: Optional[int] = None   # known right away only for the local site
    record_id: Optional[int] = None   # the local site: the job's ID in `wml jobs`, recorded when it started
    state: Optional[str] = None       # the local site: how it ended (COMPLETED, FAILED, TIMEOUT, CANCELLED)

    def as_json(self) -> dict:
        d = {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()}
        return d


def new_jobdir(base: Path, job_name: str) -> Path:
    """``<base>/<name>-<UTC timestamp>``, made unique with a counter."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    cand = base / f"{job_name}-{stamp}"
    n = 1
    while cand.exists():
        n += 1
        cand = base / f"{job_name}-{stamp}-{n}"
    return cand


def submit_command(plan: JobPlan) -> List[str]:
    return plan.scheduler.submit_argv(plan.jobdir / "job.sh")


def submit_command_text(plan: JobPlan) -> str:
    argv = submit_command(plan)
    text = sh_join(argv)
    if plan.scheduler.submit_via_stdin:
        text += " < " + sh_join([str(plan.jobdir / "job.sh")])
    return text


def check_tool(scheduler, tool: str) -> None:
    """The scheduler's submit command is here, or the one line the command path gives (nothing
    is written before it: a failed submit leaves no job directory behind)."""
    if shutil.which(tool) is None:
        hint = scheduler.missing_hint
        raise WmlError(f"{tool} not found" + (f": {hint}" if hint else ""))


def write_jobdir(plan: JobPlan, script: str) -> Path:
    """Create ``plan.jobdir`` with ``job.sh`` and ``plan.json`` atomically."""
    final = plan.jobdir
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    except OSError as e:
        raise WmlError(f"cannot create the job directory under {final.parent}: {e.strerror}") from None
    try:
        (tmp / "job.sh").write_text(script)
        os.chmod(tmp / "job.sh", 0o755)  # Cobalt runs the script itself: it must be executable
        meta = {
            "site": plan.site.name, "scheduler": plan.site.scheduler, "job_name": plan.request.job_name,
            "nodes": plan.layout.nodes, "ranks": plan.layout.size, "program": list(plan.program),
            "output": plan.output, "error": plan.error, "submit_command": submit_command_text(plan),
            "launch": plan.launch.as_dict() if plan.launch is not None else None,   # how the ranks start
        }
        (tmp / "plan.json").write_text(json.dumps(meta, indent=2) + "\n")
        try:
            os.rename(tmp, final)
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise JobdirTaken(str(final)) from None
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


class JobdirTaken(Exception):
    """Another wml process created the same job directory first (same name, same second)."""


def _replan(plan: JobPlan) -> Tuple[JobPlan, str]:
    """The same job in a fresh job directory (default output paths move with it)."""
    from ..jobscript import render_script

    name = plan.request.job_name
    jobdir = new_jobdir(plan.jobdir.parent, name)
    out, err = plan.scheduler.output_paths(jobdir, name)
    output = plan.request.output or out
    error = plan.request.error or (plan.request.output if plan.request.output else err)
    plan = replace(plan, jobdir=jobdir, output=output, error=error)
    return plan, render_script(plan)


def _submit_here(plan: JobPlan) -> str:
    """``_run_submit``; when the scheduler's command refused the job (sbatch's DNS and
    configuration errors) on a host that is not one of the site's login nodes, the one line
    says so first, then the command's last word.  A missing command and a server that did not
    answer keep their own lines (the first's hint already names the login nodes)."""
    from ..schedulers import SchedulerError, SchedulerUnreachable

    try:
        return _run_submit(plan)
    except SchedulerError as e:
        if isinstance(e, SchedulerUnreachable):
            raise
        from ..site.detect import elsewhere
        from ..site.registry import known_sites

        why = elsewhere(plan.site.name, known_sites())
        if why is None:
            raise
        said, _, kept = str(e).partition(" (script kept in ")
        fatal = said.rsplit("fatal: ", 1)[1] if "fatal: " in said else said.split(" rejected the job: ", 1)[-1]
        tool = plan.scheduler.submit_tool
        kept = f" (script kept in {kept}" if kept else ""
        raise SchedulerError(f"{why}; {tool} rejected the job: {fatal[:200]}{kept}") from None


def _run_submit(plan: JobPlan) -> str:
    from ..schedulers import SchedulerError

    argv = submit_command(plan)
    tool = argv[0]
    script = plan.jobdir / "job.sh"
    # the one scheduler-command path: missing tool, unreachable server in seconds, busy waits
    with open(script) if plan.scheduler.submit_via_stdin else open(os.devnull) as stdin:
        proc = plan.scheduler.run_command(argv, cwd=plan.workdir, stdin=stdin, wait_s=SUBMIT_TIMEOUT_S,
                                          context=f"the script is kept in {script}")
    if proc.returncode != 0:
        msg = " ".join((proc.stderr or proc.stdout).split())[:400] or f"exit status {proc.returncode}"
        raise SchedulerError(f"{tool} rejected the job: {msg} (script kept in {script})")
    return plan.scheduler.parse_submit(proc.stdout)


def _local_job_id(plan: JobPlan) -> str:
    # a chain's segments are <run>/segment-<k>: the run's name keeps their ids unique
    if plan.sweep is not None:      # a sweep's submissions are <run>/submit-<k>
        return f"local-{plan.jobdir.parent.name}-{plan.jobdir.name}"
    return f"local-{plan.jobdir.name}" if plan.segment is None else f"local-{plan.jobdir.parent.name}-{plan.segment.index}"


def _walltime_notice(plan: JobPlan, job_id: str) -> Callable[[Callable[[str], None]], None]:
    """What the local runner says when the job reaches its walltime."""
    from ..schedulers.local_run import kill_wait_s

    def notice(say: Callable[[str], None]) -> None:
        wall = plan.request.walltime_s
        say(f"wml: job {job_id} reached its walltime ({wall} s): SIGTERM to every process of the job, SIGKILL "
            f"{kill_wait_s():g} s later, as a scheduler ends a job at its time limit (TIMEOUT)\n")
        seg = plan.segment
        if seg is None:
            return
        from ..chain import record

        chain = seg.chain
        step = record.latest_step(chain.checkpoint_dir)
        nxt = (f"segment {seg.index + 1} starts from " + (f"its last checkpoint (step {step})" if step is not None
                                                          else "the beginning: there is no checkpoint")
               if seg.index < chain.length else "it was the chain's last: the run is not finished")
        from ..chain.overrun import cut_save, describe

        cut = cut_save(chain.checkpoint_dir)
        if cut is not None:      # the ranks did stop, but their save ran past the walltime
            say(f"wml: {describe(cut, seg.index, chain.length, chain.signal, chain.margin_s, time.time())}\n")
            return
        say(f"wml: segment {seg.index} of {chain.length} took no notice of SIG{chain.signal}, sent {chain.margin_s} s "
            f"before the walltime to ask its ranks to checkpoint and stop (a program must checkpoint on it and exit "
            f"75, see README 'Training longer than a walltime'; or its checkpoint takes longer than --signal-margin); "
            f"{nxt}\n")

    return notice


def _run_local(plan: JobPlan, out: Callable[[str], None], job_id: str):
    """Run the script now, as a scheduler would (schedulers/local_run.py): its output streamed
    to ``out`` and to the job's output.log, ended at its walltime."""
    from ..schedulers.local_run import run_script

    env = dict(os.environ, WML_JOB_ID=job_id, WML_JOB_DIR=str(plan.jobdir))
    return run_script(["bash", str(plan.jobdir / "job.sh")], cwd=plan.workdir, env=env, jobdir=plan.jobdir,
                      log_path=Path(plan.output), out=out, walltime_s=plan.request.walltime_s,
                      on_walltime=_walltime_notice(plan, job_id))


def submit(plan: JobPlan, script: str, out: Callable[[str], None] = sys.stdout.write) -> SubmitResult:
    if plan.site.scheduler != "local":
        from ..schedulers.commands import connect_seconds

        connect_seconds()   # a bad WML_SCHEDULER_CONNECT_S fails before the job directory is written
        check_tool(plan.scheduler, submit_command(plan)[0])    # as does a missing sbatch/bsub/qsub
    else:
        from ..schedulers.local_run import kill_wait_s

        kill_wait_s()       # a bad WML_LOCAL_KILL_WAIT_S too: no job recorded that never ran
    for attempt in range(20):
        try:
            write_jobdir(plan, script)
            break
        except JobdirTaken:
            if attempt == 19:
                raise WmlError(f"could not create a job directory under {plan.jobdir.parent}: "
                               "every name was taken by other wml processes") from None
            plan, script = _replan(plan)   # two `wml submit` in the same second: both get a directory
    local = plan.site.scheduler == "local"
    job_id = _local_job_id(plan) if local else _submit_here(plan)
    result = SubmitResult(job_id=job_id, site=plan.site.name, scheduler=plan.site.scheduler,
                          script=plan.jobdir / "job.sh", submit_command=submit_command_text(plan),
                          jobdir=plan.jobdir, output=plan.scheduler.expand_output(plan.output, job_id),
                          error=plan.scheduler.expand_output(plan.error, job_id))
    if not local:
        return result
    # a local job is in the registry while it runs (wml jobs/status/logs -f from another shell)
    from ..jobs.lifecycle import record_local_end, record_local_start

    rec = record_local_start(result, plan)
    try:
        end = _run_local(plan, out, job_id)
    except WmlError as e:     # Ctrl-C (130): the job was ended as `wml cancel` ends it
        from ..schedulers.local_run import LocalEnd

        if rec is not None:
            record_local_end(rec, LocalEnd(e.exit_code, cancelled=e.exit_code == 130))
        raise
    state = record_local_end(rec, end) if rec is not None else None
    return replace(result, exit_code=end.exit_code, record_id=rec.id if rec else None, state=state)
