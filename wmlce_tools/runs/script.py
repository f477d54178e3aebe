"""``wml submit --script job.sh``: a hand-written job script, submitted as it is written and
tracked like wml's own (``wml jobs/status/logs/cancel``).

The script is copied into its job directory (``wml-jobs/<name>-<time>/job.sh``, kept beside
``plan.json``) and submitted from the current directory, as ``sbatch job.sh`` would be.  Its
directives must be the site's scheduler's; where its output goes is read from them (else the
scheduler's default name in the current directory).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional, Tuple

from ..errors import WmlError
from ..schedulers.passthrough import PREFIX, TITLE
from ..quoting import sh_join

#: what each scheduler names a job's output when its script says nothing (relative to the
#: submit directory): sbatch(1) "slurm-%j.out"; PBS Pro "<name>.o<sequence number>"; Cobalt
#: "<jobid>.output"; LSF mails it (no file)
DEFAULT_OUTPUT = {"slurm": "slurm-{id}.out", "pbs": "{name}.o{seq}", "cobalt": "{id}.output"}
_OUT_OPTS = {"slurm": ("--output", "-o"), "pbs": ("-o",), "lsf": ("-o", "-oo"), "cobalt": ("-o", "--output")}
_NAME_OPTS = {"slurm": ("--job-name", "-J"), "pbs": ("-N",), "lsf": ("-J",), "cobalt": ("--jobname",)}


def _directives(text: str, prefix: str):
    """(option, value) of each ``prefix`` line of the script's header."""
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        words = shlex.split(line[len(prefix):], comments=False, posix=True) if line[len(prefix):].strip() else []
        i = 0
        while i < len(words):
            word = words[i]
            if word.startswith("--") and "=" in word:
                yield tuple(word.split("=", 1))
            elif i + 1 < len(words) and not words[i + 1].startswith("-"):
                yield word, words[i + 1]
                i += 1
            else:
                yield word, None
            i += 1


def read_script(site, path: str) -> Tuple[str, str, Optional[str]]:
    """(text, job name, output pattern or None) of the script at ``path`` for ``site``;
    WmlError when it is not a job script of the site's scheduler."""
    p = Path(path)
    if not p.is_file():
        raise WmlError(f"--script {path}: no such file")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise WmlError(f"--script {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if not text.startswith("#!"):
        raise WmlError(f"--script {path}: a job script starts with '#!' (e.g. #!/bin/bash)")
    sched = site.scheduler
    if sched == "local":
        return text, p.stem, None
    prefix = PREFIX[sched]
    others = sorted({m for m in re.findall(r"^(#SBATCH|#PBS|#BSUB|#COBALT)\b", text, re.M) if m != prefix})
    if others:
        raise WmlError(f"--script {path}: has {', '.join(others)} lines; {site.name} ({TITLE[sched]}) reads {prefix} lines")
    opts = dict(_directives(text, prefix))
    name = next((opts[o] for o in _NAME_OPTS[sched] if opts.get(o)), p.name)
    output = next((opts[o] for o in _OUT_OPTS[sched] if opts.get(o)), None)
    return text, name, output


def _output(site, sched, output: Optional[str], name: str, job_id: str, workdir: Path) -> str:
    if output is None:
        pattern = DEFAULT_OUTPUT.get(site.scheduler)
        if pattern is None:
            return "(not written: LSF mails a job's output when its script gives no #BSUB -o)"
        seq = job_id.split(".")[0]
        output = pattern.format(id=job_id, name=name, seq=seq)
    else:
        output = sched.expand_output(output, job_id)
    return str(workdir / output) if not os.path.isabs(output) else output


def submit_script(site, path: str, *, dry_run: bool = False, jobs_base: Optional[Path] = None,
                  out: Callable[[str], None] = sys.stdout.write):
    """Submit the hand-written script; returns the SubmitResult (None for a dry run)."""
    from ..schedulers import SchedulerError, get_scheduler
    from .submission import SUBMIT_TIMEOUT_S, SubmitResult, new_jobdir

    text, name, output = read_script(site, path)
    sched = get_scheduler(site.scheduler)
    workdir = Path.cwd()
    base = jobs_base or Path(os.environ.get("WML_JOBS_DIR") or workdir / "wml-jobs")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).stem) or "job"
    jobdir = new_jobdir(base.absolute(), safe)
    local = site.scheduler == "local"
    argv = ["bash", str(jobdir / "job.sh")] if local else sched.submit_argv(jobdir / "job.sh")
    command = sh_join(argv) + (" < " + sh_join([str(jobdir / "job.sh")]) if sched.submit_via_stdin else "")
    if dry_run:
        out(f"# dry run: would copy {path} to {jobdir}/job.sh and run: {command}\n")
        return None
    if not local:
        from ..schedulers.commands import connect_seconds
        from .submission import check_tool

        connect_seconds()
        check_tool(sched, argv[0])
    try:
        jobdir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{jobdir.name}.", dir=jobdir.parent))
        shutil.copyfile(path, tmp / "job.sh")
        os.chmod(tmp / "job.sh", 0o755)
        (tmp / "plan.json").write_text(json.dumps({"site": site.name, "scheduler": site.scheduler, "job_name": name,
                                                   "script_from": str(Path(path).absolute()),
                                                   "submit_command": command}, indent=2) + "\n")
        os.rename(tmp, jobdir)
    except OSError as e:
        raise WmlError(f"cannot create the job directory under {jobdir.parent}: {e.strerror}") from None
    if local:
        return _run_here(site, sched, jobdir, name, command, workdir, out)
    with open(jobdir / "job.sh") if sched.submit_via_stdin else open(os.devnull) as stdin:
        proc = sched.run_command(argv, cwd=workdir, stdin=stdin, wait_s=SUBMIT_TIMEOUT_S,
                                 context=f"the script is kept in {jobdir / 'job.sh'}")
    if proc.returncode != 0:
        msg = " ".join((proc.stderr or proc.stdout).split())[:400] or f"exit status {proc.returncode}"
        raise SchedulerError(f"{argv[0]} rejected the job: {msg} (script kept in {jobdir / 'job.sh'})")
    job_id = sched.parse_submit(proc.stdout)
    shown = _output(site, sched, output, name, job_id, workdir)
    return SubmitResult(job_id=job_id, site=site.name, scheduler=site.scheduler, script=jobdir / "job.sh",
                        submit_command=command, jobdir=jobdir, output=shown, error=shown)


def _run_here(site, sched, jobdir: Path, name: str, command: str, workdir: Path, out):
    """The local site: the script runs now, as wml's own local jobs do (recorded while it runs)."""
    from dataclasses import replace

    from ..jobs.lifecycle import record_local_end, record_local_start
    from ..schedulers.local_run import run_script
    from .submission import SubmitResult

    job_id = f"local-{jobdir.name}"
    log = jobdir / "output.log"
    result = SubmitResult(job_id=job_id, site=site.name, scheduler="local", script=jobdir / "job.sh",
                          submit_command=command, jobdir=jobdir, output=str(log), error=str(log))
    rec = record_local_start(result, None)
    env = dict(os.environ, WML_JOB_ID=job_id, WML_JOB_DIR=str(jobdir))
    end = run_script(["bash", str(jobdir / "job.sh")], cwd=workdir, env=env, jobdir=jobdir, log_path=log, out=out,
                     walltime_s=None, on_walltime=lambda say: None)
    state = record_local_end(rec, end) if rec is not None else None
    return replace(result, exit_code=end.exit_code, record_id=rec.id if rec else None, state=state)
