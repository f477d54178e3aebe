"""A deterministic program that speaks the chain contract directly (ddl_runtime.checkpoint.protocol),
to test the job side's plumbing without the runtime's checkpoint code.

    python resumable.py --steps S --result FILE [--steps-per-walltime K] [--step-s SECONDS]

It computes S steps of a fixed integer recurrence (so any split into segments gives the same
final value as one job).  In a chain (WML_CHECKPOINT_DIR set) it resumes from latest.json, and
does at most K steps per segment (the work one walltime holds), then waits for the stop signal
(WML_STOP_SIGNAL): on it, rank 0 writes its state and then latest.json, each atomically, and
every rank exits 75.  A rank that waits 120 s without the signal exits 3 and says so.  Each rank
writes what it saw (the contract's variables, whether the signal reached it) to
ranks/seg<k>-rank<r>.json in the checkpoint directory; rank 0 writes `waiting-seg<k>` there
when it has reached its K steps.  Exit 0 once S steps are done, rank 0 having written FILE.
"""
import signal

STOP = []


def _stop(*_):
    STOP.append(1)
    # taken: ignore it from now on, as ddl_runtime's handler does (the launcher repeats it until the
    # rank ends, and Python puts back the killing default for a signal with a Python handler at exit)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


signal.signal(signal.SIGUSR1, _stop)   # first: a signal must never kill it

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from ddl_runtime.checkpoint.protocol import (CHAIN_LENGTH_ENV, CHECKPOINT_DIR_ENV, EXIT_RESUME,  # noqa: E402
                                             LATEST_FILE, RUN_ID_ENV, SEGMENT_ENV, STOP_SIGNAL_ENV)

# importing ddl_runtime.checkpoint installs the runtime's own handler: this program keeps its own
signal.signal(signal.SIGUSR1, signal.SIG_IGN if STOP else _stop)

WAIT_FOR_SIGNAL_S = 120
MASK = (1 << 64) - 1


def advance(value: int, step: int) -> int:
    return (value * 6364136223846793005 + 1442695040888963407 + step) & MASK


def atomic_json(path: Path, data: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--steps-per-walltime", type=int, default=0)
    ap.add_argument("--step-s", type=float, default=0.01)
    a = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    ckpt = os.environ.get(CHECKPOINT_DIR_ENV)
    step, value = 0, 1
    if ckpt:
        ckpt_dir = Path(ckpt)
        segment = int(os.environ[SEGMENT_ENV])
        expected = signal.Signals["SIG" + os.environ[STOP_SIGNAL_ENV]]
        assert expected == signal.SIGUSR1, expected
        latest = ckpt_dir / LATEST_FILE
        if latest.exists():
            meta = json.loads(latest.read_text())
            state = json.loads(Path(meta["path"]).read_text())
            step, value = state["step"], state["value"]
            print(f"rank {rank}: segment {segment} resumes at step {step}", flush=True)
    done_here = 0
    while step < a.steps:
        if STOP:
            break
        if ckpt and a.steps_per_walltime and done_here >= a.steps_per_walltime:
            if rank == 0:
                (ckpt_dir / f"waiting-seg{segment}").write_text(str(step))
            deadline = time.monotonic() + WAIT_FOR_SIGNAL_S
            while not STOP and time.monotonic() < deadline:
                time.sleep(0.02)
            if not STOP:
                print(f"rank {rank}: no SIGUSR1 within {WAIT_FOR_SIGNAL_S} s of step {step}", file=sys.stderr)
                return 3
            break
        value = advance(value, step)
        step += 1
        done_here += 1
        time.sleep(a.step_s)
    if ckpt:
        (ckpt_dir / "ranks").mkdir(exist_ok=True)
        seen = {k: os.environ.get(k) for k in (CHECKPOINT_DIR_ENV, STOP_SIGNAL_ENV, SEGMENT_ENV, CHAIN_LENGTH_ENV, RUN_ID_ENV)}
        atomic_json(ckpt_dir / "ranks" / f"seg{segment}-rank{rank}.json",
                    {"env": seen, "signalled": bool(STOP), "step": step})
    if step < a.steps:       # stopped for the walltime
        if rank == 0:
            path = ckpt_dir / f"state-{step}.json"
            atomic_json(path, {"step": step, "value": value})
            atomic_json(ckpt_dir / LATEST_FILE, {"step": step, "segment": segment, "path": str(path),
                                                 "time": time.time(), "framework": "test"})
        print(f"rank {rank}: stopped for the walltime at step {step}", flush=True)
        return EXIT_RESUME
    if rank == 0:
        atomic_json(Path(a.result), {"step": step, "value": value})
    print(f"rank {rank}: finished at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
