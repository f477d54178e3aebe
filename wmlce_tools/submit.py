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

from .errors import WmlError
from .jobscript import JobPlan
from .quoting import sh_join

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
    from .jobscript import render_script

    name = plan.request.job_name
    jobdir = new_jobdir(plan.jobdir.parent, name)
    out, err = plan.scheduler.output_paths(jobdir, name)
    output = plan.request.output or out
    error = plan.request.error or (plan.request.output if plan.request.output else err)
    plan = replace(plan, jobdir=jobdir, output=output, error=error)
    return plan, render_script(plan)


def _run_submit(plan: JobPlan) -> str:
    argv = submit_command(plan)
    tool = argv[0]
    script = plan.jobdir / "job.sh"
    # the one scheduler-command path: missing tool, unreachable server in seconds, busy waits
    with open(script) if plan.scheduler.submit_via_stdin else open(os.devnull) as stdin:
        proc = plan.scheduler.run_command(argv, cwd=plan.workdir, stdin=stdin, wait_s=SUBMIT_TIMEOUT_S,
                                          context=f"the script is kept in {script}")
    if proc.returncode != 0:
        msg = " ".join((proc.stderr or proc.stdout).split())[:400] or f"exit status {proc.returncode}"
        raise WmlError(f"{tool} rejected the job: {msg} (script kept in {script})")
    return plan.scheduler.parse_submit(proc.stdout)


def _run_local(plan: JobPlan, out: Callable[[str], None]) -> tuple[str, int]:
    """Run the script now; stream its output to ``out`` and to the job's output.log."""
    # a chain's segments are <run>/segment-<k>: the run's name keeps their ids unique
    job_id = f"local-{plan.jobdir.name}" if plan.segment is None else f"local-{plan.jobdir.parent.name}-{plan.segment.index}"
    env = dict(os.environ, WML_JOB_ID=job_id, WML_JOB_DIR=str(plan.jobdir))
    log_path = Path(plan.output)
    with open(log_path, "w", buffering=1) as log:
        proc = subprocess.Popen(["bash", str(plan.jobdir / "job.sh")], cwd=plan.workdir, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                out(line)
            code = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            raise WmlError(f"interrupted; job output so far is in {log_path}", exit_code=130) from None
    return job_id, code


def submit(plan: JobPlan, script: str, out: Callable[[str], None] = sys.stdout.write) -> SubmitResult:
    if plan.site.scheduler != "local":
        from .schedulers.commands import connect_seconds

        connect_seconds()   # a bad WML_SCHEDULER_CONNECT_S fails before the job directory is written
    for attempt in range(20):
        try:
            write_jobdir(plan, script)
            break
        except JobdirTaken:
            if attempt == 19:
                raise WmlError(f"could not create a job directory under {plan.jobdir.parent}: "
                               "every name was taken by other wml processes") from None
            plan, script = _replan(plan)   # two `wml submit` in the same second: both get a directory
    exit_code = None
    if plan.site.scheduler == "local":
        job_id, exit_code = _run_local(plan, out)
    else:
        job_id = _run_submit(plan)
    return SubmitResult(job_id=job_id, site=plan.site.name, scheduler=plan.site.scheduler,
                        script=plan.jobdir / "job.sh", submit_command=submit_command_text(plan),
                        jobdir=plan.jobdir, output=plan.scheduler.expand_output(plan.output, job_id),
                        error=plan.scheduler.expand_output(plan.error, job_id), exit_code=exit_code)
