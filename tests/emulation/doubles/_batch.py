"""Shared code of the batch-scheduler TEST DOUBLES (doubles/lsf: bsub, bjobs, bkill;
doubles/cobalt: qsub, qstat, qdel): no open implementation of IBM Spectrum LSF or ALCF's Cobalt
exists, so tests/emulation stands in for them.

Like the PBS double, a submission runs the job at once (to its end) and records it in
$WML_DOUBLE_STATE/<scheduler>/<id>.json, where the status and cancel doubles read it; a job whose
dependency the scheduler would never satisfy is recorded held and never runs.

TIME IS SCALED: the scheduler's clock (a run limit, a warning before it) counts
$WML_DOUBLE_SECONDS_PER_MINUTE real seconds (default 60) per minute the job asked for, so a test
of a 10-minute walltime takes seconds.  What the job script does itself (its own timer, `sleep`)
is not scaled: it runs in real time.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Dict, List, Optional, Tuple


def seconds_per_minute() -> float:
    return float(os.environ.get("WML_DOUBLE_SECONDS_PER_MINUTE", "60"))


def state_dir(scheduler: str) -> str:
    base = os.environ.get("WML_DOUBLE_STATE") or os.path.join(os.environ.get("TMPDIR", "/tmp"), "batch-double")
    path = os.path.join(base, scheduler)
    os.makedirs(path, exist_ok=True)
    return path


def next_id(scheduler: str, first: int) -> str:
    return str(first + len([n for n in os.listdir(state_dir(scheduler)) if n.endswith(".json")]))


def load(scheduler: str, job_id: str) -> Optional[dict]:
    try:
        with open(os.path.join(state_dir(scheduler), f"{job_id}.json")) as f:
            return json.load(f)
    except OSError:
        return None


def save(scheduler: str, job_id: str, record: dict) -> None:
    path = os.path.join(state_dir(scheduler), f"{job_id}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)


def log(record: dict) -> None:
    path = os.environ.get("WML_DOUBLE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")


def run_job(argv: List[str], cwd: str, env: Dict[str, str], stdout: str, stderr: str,
            events: List[Tuple[float, str, int]]) -> Tuple[int, List[Tuple[float, str]]]:
    """Run the job script in its own session; ``events``: (seconds after start, "script" or
    "job", signal) in time order: "script" signals the script's process (where the scheduler's
    warning goes), "job" every process of the job (its process group: the limit's action).
    Returns the exit status (128 + N when killed by signal N) and the events that happened."""
    done: List[Tuple[float, str]] = []
    with open(stdout, "a") as fo, open(stderr, "a") if stderr != stdout else open(stdout, "a") as fe:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        start = time.monotonic()
        pending = list(events)
        while proc.poll() is None:
            now = time.monotonic() - start
            while pending and pending[0][0] <= now and proc.poll() is None:
                at, target, sig = pending.pop(0)
                try:
                    if target == "script":
                        os.kill(proc.pid, sig)
                    else:
                        os.killpg(proc.pid, sig)
                    done.append((round(now, 2), f"{target}:{signal.Signals(sig).name}"))
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)      # what the job left behind ends with it
        except (ProcessLookupError, PermissionError):
            pass
    code = proc.returncode
    return (128 - code if code < 0 else code), done
