"""How long a healed fault costs on the local site (issue 61): ddlrun --restarts with 2 emulated
nodes + 1 spare, torch's DistributedOptimizer and Checkpointer(every=4), 2 ranks a node; every
rank of node 1 SIGKILLs itself as step 10 begins (tests/heal/programs/heal_train.py).  From each
run's attempts.json: the time from the fault to the first step after the restart, the restarted
attempt's own program start (its launch to its first step: python, torch, the runtime, the
checkpoint's load), what is left (ddlrun's share: noticing, ending the rest, relaunching), and the
steps redone.  Then the same with one rank hanging outside any collective (DDL_HANG_FLOOR_S=3):
the time from its last step to the end of the attempt (the detection).

    python benchmarks/heal_restart.py [--repeat 3]

Targets: fault to first step under 10 s plus the program's own start; at most one checkpoint
interval (4 steps) redone.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "tests" / "heal" / "programs" / "heal_train.py"


def run(kind: str) -> dict:
    base = Path(tempfile.mkdtemp(prefix="heal-restart-"))
    (base / "out").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WML_", "DDL_", "PMI_"))}
    env.update(OMP_NUM_THREADS="1", WML_JOB_DIR=str(base / "job"), PYTHONPATH=str(REPO))
    fault = ["--kill-at", "10", "--node", "1"] if kind == "kill" else ["--hang-at", "10", "--node", "1"]
    if kind == "hang":
        env["DDL_HANG_FLOOR_S"] = "3"
    rpn = "4" if kind == "kill" else "2"
    proc = subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "-n", rpn, "--emulate-nodes", "2",
                           "--spare-nodes", "1", "--restarts", "1", "--", "python", str(TRAIN), str(base / "out"),
                           *fault], env=env, cwd=base, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"the run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rec = json.loads((base / "job" / "attempts.json").read_text())
    a, b = rec["attempts"]
    lost = b["first_step_at"] - a["fault_at"]
    start = b["first_step_at"] - b["started"]
    first_start = a["first_step_at"] - a["started"]
    redone = a["reached_step"] - (b["restored_step"] + 1)
    return {"lost": lost, "start": start, "ddlrun": lost - start, "redone": redone, "first_start": first_start,
            "detect": a["ended"] - a["fault_at"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    for kind in ("kill", "hang"):
        rows = [run(kind) for _ in range(a.repeat)]
        for r in rows:
            print(f"{kind}: fault -> first step after the restart {r['lost']:.1f} s = the restarted program's start "
                  f"{r['start']:.1f} s + {r['ddlrun']:.1f} s; steps redone {r['redone']} (checkpoint every 4); "
                  f"from the fault to the attempt's end {r['detect']:.1f} s; attempt 1's own start {r['first_start']:.1f} s")
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"{kind} median of {a.repeat}: {med['lost']:.1f} s lost = {med['start']:.1f} s program start + "
              f"{med['ddlrun']:.1f} s; {med['redone']:.0f} steps redone; detection {med['detect']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
