"""Run one trial (or every K-th from INDEX) inside a job: the job script's launch line is
``python -m wmlce_tools.sweeps.trial RUN INDEX [--stride K] -- ddlrun ... -- program {lr}``.

For each trial: its ``{name}`` fields filled in, ``WML_TRIAL`` and ``WML_PARAM_<NAME>`` in the
environment (ddlrun passes them to every rank), its output copied to
``trials/<i>/output.log`` as it comes, and ``state.json`` written at the start (RUNNING) and
the end (COMPLETED / FAILED / TIMEOUT / CANCELLED, exit status, walltime, metrics = the last JSON object
line rank 0 printed).  A trial that fails does not stop the next; the exit status is the
first failing trial's (0 when every trial completed).  SIGTERM (scancel, bkill, qdel, the
walltime) goes to the trial's process group and the trial is recorded CANCELLED, or TIMEOUT
when it comes at the job's walltime (``WML_JOB_DEADLINE``, set by the job script)."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import List, Optional, Sequence

from ..errors import WmlError, run_main
from . import record
from .grid import Trial, substitute

TAIL_LINES = 200
#: the lines of MPICH's (Hydra's) banner when a rank ends by a signal: after a cancel or the
#: walltime they say nothing the trial's state does not ("TIMEOUT", "CANCELLED")
_BANNER = re.compile(rb"^(=+|=   .*|YOUR APPLICATION TERMINATED WITH THE EXIT STRING: .*|"
                     rb"This typically refers to a problem with your application\.|"
                     rb"Please see the FAQ page for debugging suggestions)\r?$")


class _Stop:
    signum: Optional[int] = None
    when: Optional[float] = None
    child: Optional[subprocess.Popen] = None


def at_walltime(env, when: Optional[float]) -> bool:
    """Whether a stop signal that came at ``when`` is the walltime's: at or after the job's
    deadline (``WML_JOB_DEADLINE``, taken when the job script starts the trials, so a little
    after the scheduler's own), less a tolerance of 5% of the walltime (1 to 60 s) for that."""
    text = env.get(record.DEADLINE_VAR)
    if not text or when is None:
        return False
    try:
        deadline, wall = (float(x) for x in text.split("/"))
    except ValueError:
        return False
    return when >= deadline - min(60.0, max(1.0, 0.05 * wall))


def _on_signal(signum, _frame):
    if _Stop.signum is None:
        _Stop.when = time.time()
    _Stop.signum = signum
    child = _Stop.child
    if child is not None and child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def run_trial(run_dir: Path, rec: record.SweepRecord, index: int, command: Sequence[str],
              placement: Optional[dict] = None, out=None, extra_env: Optional[dict] = None) -> int:
    """Run trial ``index``: ``command`` (with ``{name}`` fields) in its environment; returns its
    exit status.  ``out``: where its output goes besides output.log (default: stdout)."""
    out = out if out is not None else sys.stdout.buffer
    # trials running side by side share the job's output: each line says its trial, as ranks say theirs
    label = f"[trial {index}] ".encode() if placement is not None else b""
    trial = Trial(index, tuple(rec.trials[index].items()))
    argv = substitute(command, trial.values)
    d = record.trial_dir(run_dir, index)
    d.mkdir(parents=True, exist_ok=True)
    prev = record.read_state(run_dir, index) or {}
    job_id = next((os.environ[v] for v in ("SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID", "LSB_JOBID", "PBS_JOBID",
                                          "COBALT_JOBID", "WML_JOB_ID") if os.environ.get(v)), None)
    state = {"index": index, "params": trial.values, "state": record.RUNNING, "exit_code": None,
             "start": time.time(), "end": None, "walltime_s": None, "host": socket.gethostname(),
             "job_id": job_id, "attempt": int(prev.get("attempt", 0)) + 1, "placement": placement,
             "metrics": None}
    record.write_state(run_dir, index, state)
    if prev.get("attempt") and (d / record.OUTPUT_FILE).exists():    # a rerun: keep the attempt before
        os.replace(d / record.OUTPUT_FILE, d / f"output.attempt-{int(prev['attempt'])}.log")
    shutil.rmtree(d / "stats", ignore_errors=True)     # an earlier attempt's records
    env = dict(os.environ, **trial.env(), WML_SWEEP_RUN=str(run_dir), DDL_STATS_DIR=str(d / "stats"),
               **(extra_env or {}))       # DDL_STATS_DIR: each rank's record (`wml report`)
    tail: deque = deque(maxlen=TAIL_LINES)
    with open(d / record.OUTPUT_FILE, "wb") as log:
        try:
            child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            msg = f"wml: trial {index}: cannot run {argv[0]}: {e.strerror}\n".encode()
            log.write(msg)
            out.write(msg)
            code = 127
        else:
            _Stop.child = child
            if _Stop.signum is not None:       # the signal came while it was starting
                _on_signal(_Stop.signum, None)
            for line in iter(child.stdout.readline, b""):
                if _Stop.signum is not None and _BANNER.match(line.rstrip(b"\n")):
                    continue           # MPICH's banner for a rank it was asked to stop
                log.write(line)
                log.flush()
                out.write(label + line)
                out.flush()
                tail.append(line.decode(errors="replace"))
            code = child.wait()
            _Stop.child = None
    end = time.time()
    if _Stop.signum is not None:
        final = record.TIMEOUT if at_walltime(os.environ, _Stop.when) else record.CANCELLED
    else:
        final = record.COMPLETED if code == 0 else record.FAILED
    state.update(state=final, exit_code=code, end=end, walltime_s=round(end - state["start"], 3),
                 metrics=record.last_json_object(list(tail)))
    record.write_state(run_dir, index, state)
    return code


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m wmlce_tools.sweeps.trial")
    p.add_argument("run_dir")
    p.add_argument("index", help="the first trial (the array index)")
    p.add_argument("--stride", type=int, default=None, help="then every STRIDE-th trial after it (PBS --max-running); "
                   "without it, that one trial")
    p.add_argument("--base", type=int, default=0, help="subtract this from INDEX (LSF arrays count from 1)")
    return p


def main_args(argv: List[str]) -> int:
    if "--" not in argv:
        raise WmlError("usage: python -m wmlce_tools.sweeps.trial RUN INDEX [--stride K] -- COMMAND...")
    cut = argv.index("--")
    a = _parser().parse_args(argv[:cut])
    command = argv[cut + 1:]
    run_dir = Path(a.run_dir)
    rec = record.require(run_dir)
    try:
        first = int(a.index) - a.base
    except ValueError:
        raise WmlError(f"trial index {a.index!r} is not a number (is this job an array job?)") from None
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    only = os.environ.get("WML_SWEEP_ONLY")       # a resume's trials, in array order
    indices = [int(i) for i in only.split(",")] if only else list(range(rec.size))
    status = 0
    positions = range(first, len(indices), a.stride) if a.stride else [first] if first < len(indices) else []
    if not positions:
        raise WmlError(f"trial {first} is past the sweep's {len(indices)} trial(s)")
    for pos in positions:
        if _Stop.signum is not None:
            break
        placement = os.environ.get("WML_TRIAL_PLACEMENT")
        code = run_trial(run_dir, rec, indices[pos], command,
                         placement=json.loads(placement) if placement else None)
        status = status or code
    return status


def main() -> None:
    run_main("wml-trial", lambda: main_args(sys.argv[1:]))


if __name__ == "__main__":
    main()
