"""What a chain segment does once ddlrun has ended (``segment.py``, the job script's step,
calls ``end_segment(RUN_DIR, INDEX, STATUS)``):

- STATUS 0: the run is finished: write FINISHED in the checkpoint directory and cancel the
  segments still queued after this one (their ids are in chain.json).
- STATUS 75 (EXIT_RESUME): stopped for the walltime: say which segment resumes (or, in the
  last segment, that the run is not finished and how to go on).
- anything else: a failure; the next segment (afterany) resumes from the last good checkpoint.
  When ddlrun --restarts found nodes that failed and no spare to replace them (the segment's
  ``attempts.json``: ``exclude_next``), the segments still queued are kept off those nodes in
  the scheduler's own form (``Scheduler.exclude_argv``: Slurm's ``scontrol update
  ExcNodeList``, LSF's ``bmod -R "select[hname!=...]"``), or a line says the scheduler has none.
One line each, the step from latest.json; records ``segment-<k>/end.json``; exits STATUS.

``--afterok-only`` (Cobalt): the scheduler starts a dependent job only when the job it waits for
exited 0 (Cobalt's queue manager satisfies ``--dependencies`` on exit status 0 alone and holds the
dependent job as ``dep_hold``/``dep_fail`` otherwise), so a segment that is not the chain's last
exits 0 whatever STATUS was, saying so; the real status stays in end.json, which ``wml status``
reads.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import List

from ddl_runtime.checkpoint.protocol import EXIT_RESUME, FINISHED_FILE

from . import record


def _say(text: str) -> None:
    sys.stdout.write(f"wml: {text}\n")
    sys.stdout.flush()


def cancel_rest(rec: record.ChainRecord, index: int) -> List[str]:
    from ..schedulers import get_scheduler

    ids = rec.job_ids_after(index)
    if not ids or rec.scheduler == "local":
        return []
    sched = get_scheduler(rec.scheduler)
    done = []
    for job_id in ids:
        try:
            proc = sched.run_command(sched.cancel_argv(job_id), wait_s=60, retry_busy=False)
            sched.parse_cancel(proc.stdout, proc.stderr, proc.returncode)
            done.append(job_id)
        except Exception as e:   # SchedulerError, WmlError; the rest still exit at once: FINISHED is there
            _say(f"could not cancel segment job {job_id} ({e}); it will find the run finished and exit at once")
    return done


def _keep_off_failed_nodes(run_dir: Path, rec: record.ChainRecord, index: int) -> None:
    """The nodes this segment's ddlrun found failed with no spare: the queued segments avoid them."""
    from ..runstats.attempts import load as load_attempts
    from ..schedulers import get_scheduler

    attempts = load_attempts(run_dir / f"segment-{index}")
    if attempts is None or not attempts.exclude_next:
        return
    new = [h for h in attempts.exclude_next if h not in rec.excluded]
    rec.excluded += new
    record.save(run_dir, rec)
    ids = rec.job_ids_after(index)
    if not ids:
        return
    nodes = ", ".join(rec.excluded)
    sched = get_scheduler(rec.scheduler)
    if sched.no_exclusion:
        _say(f"node(s) {nodes} failed with no spare to replace them; the next segment cannot be kept off them: "
             f"{sched.no_exclusion}")
        return
    for job_id in ids:
        argv = sched.exclude_argv(job_id, list(rec.excluded))
        try:
            proc = sched.run_command(argv, wait_s=60, retry_busy=False)
            if proc.returncode != 0:
                raise RuntimeError((proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}")
            _say(f"job {job_id} of the chain now leaves out {nodes}, which failed ({' '.join(argv)})")
        except Exception as e:   # SchedulerError, WmlError, the tool's refusal: the segment still runs
            _say(f"could not keep job {job_id} off {nodes} ({' '.join(argv)}: {e})")


def end_segment(run_dir: Path, index: int, status: int, afterok_only: bool = False) -> int:
    code = _end_segment(run_dir, index, status)
    rec = record.load(run_dir)
    if afterok_only and code != 0 and rec is not None and index < rec.length:
        _say(f"exiting 0, not {code}, so that {rec.scheduler.capitalize()} starts segment {index + 1}: it holds a job "
             f"whose dependency exited non-zero (dep_fail); status {code} is recorded in "
             f"{run_dir / f'segment-{index}' / record.END_FILE}")
        return 0
    return code


def _end_segment(run_dir: Path, index: int, status: int) -> int:
    rec = record.load(run_dir)
    if rec is None:
        _say(f"{run_dir / record.CHAIN_FILE} is missing or unreadable; segment {index} ends with status {status}")
        return status
    ckpt = Path(rec.checkpoint_dir)
    step = record.latest_step(ckpt)
    at = f" at step {step}" if step is not None else ""
    where = f"segment {index} of {rec.length}"
    if status == 0:
        finished = ckpt / FINISHED_FILE
        if not finished.exists():
            record.write_json_atomic(finished, {"segment": index, "step": step, "time": time.time()})
        cancelled = cancel_rest(rec, index)
        _say(f"run {rec.run_id} finished in {where}" + (f" (last checkpoint: step {step})" if step is not None else "") +
             (f"; cancelled the segments still queued: {' '.join(cancelled)}" if cancelled else ""))
    elif status == EXIT_RESUME and index < rec.length:
        _say(f"{where} stopped for the walltime{at}; segment {index + 1} resumes from it")
    elif status == EXIT_RESUME:
        _say(f"{where} stopped for the walltime{at}, and it was the chain's last: the run is not finished; "
             f"continue it with wml submit --chain N --checkpoint-dir {ckpt} and the same program")
    else:
        nxt = f"segment {index + 1} resumes from the last good checkpoint" if index < rec.length else \
            "it was the chain's last: the run is not finished"
        _say(f"{where} failed with exit status {status}{at and ' (last checkpoint' + at + ')'}; {nxt}")
        _keep_off_failed_nodes(run_dir, rec, index)
    (run_dir / f"segment-{index}").mkdir(parents=True, exist_ok=True)   # a script wml render printed: not made yet
    record.write_json_atomic(run_dir / f"segment-{index}" / record.END_FILE,
                             {"status": status, "step": step, "time": time.time()})
    return status
