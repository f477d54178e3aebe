"""gpu_checks.sh's sweep line (issue 39): `wml sweep` of 4 one-GPU trials packed on this host (the local
site): every trial COMPLETED, each holding one GPU (CUDA_VISIBLE_DEVICES names one device, and the trial
sees exactly one), not the whole node.  Prints CHECK lines (benchmarks/_checks.py)."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _checks import check

HERE = Path(__file__).resolve().parent


def main() -> int:
    if "--cpu" in sys.argv:
        return 0
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "WML_JOBS_DIR": f"{work}/jobs", "WML_DATA_DIR": f"{work}/data"}
        wml = [sys.executable, "-m", "wmlce_tools"]
        run = subprocess.run([*wml, "sweep", "--gpus-per-rank", "1", "--seeds", "4", "--json", sys.executable,
                              str(HERE / "_sweep_gpu_trial.py")], capture_output=True, text=True, env=env, timeout=300)
        lines = [raw for raw in run.stdout.splitlines() if raw.startswith("{")]
        if not lines:
            check("sweep 4 one-GPU trials", f"exit {run.returncode}: {run.stderr.strip()[-200:]}", "all COMPLETED", False)
            return 1
        run_id = json.loads(lines[-1])["run_id"]
        show = subprocess.run([*wml, "sweep", "show", run_id, "--format", "json"], capture_output=True, text=True,
                              env=env, timeout=60)
        shown = json.loads(show.stdout or "{}")       # {"run_id", "state", "counts", "trials": [...]}
        trials = shown.get("trials", []) if isinstance(shown, dict) else []
        done = sum(1 for t in trials if t.get("state") == "COMPLETED")
        one_gpu = sum(1 for t in trials if t.get("devices") == 1 or (t.get("metrics") or {}).get("devices") == 1)
        check("sweep 4 one-GPU trials", f"{done}/4 COMPLETED, {one_gpu}/4 saw one GPU", "4/4 and 4/4",
              done == 4 and one_gpu == 4, trials=trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
