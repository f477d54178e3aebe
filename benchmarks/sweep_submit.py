"""Wall time of `wml sweep` over 1,000 trials, rendered and submitted to the local Slurm as one
job array (issue 39: under 3 s), then cancelled with `wml cancel RUN`.

    scripts/local-slurm start && eval "$(scripts/local-slurm env)"
    python benchmarks/sweep_submit.py [--trials 1000] [--repeat 5]

Each repeat runs the real command line (`python -m wmlce_tools sweep --site local-slurm
--param i=0,...,999 --max-running 2 --json prog.py --i {i}`) in its own interpreter: the
grid, the checks ({i} names a parameter of every trial, the array limit), the run directory
(sweep.json with 1,000 trials), the script, sbatch, the registry.  Also timed: the same with
--dry-run (no sbatch, nothing written) and one plain `wml submit` of one trial, for scale.
After each repeat the array is cancelled (wml cancel RUN) and the test waits until squeue
shows none of its tasks, so repeats do not queue behind each other.
Reports median and max wall time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv, cwd, env):
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv[:6])}... failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return wall, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit('no SLURM_CONF: scripts/local-slurm start && eval "$(scripts/local-slurm env)"')
    work = Path(tempfile.mkdtemp(prefix="wml-sweep-bench-"))
    prog = work / "prog.py"
    prog.write_text("import sys; print(sys.argv)\n")
    env = dict(os.environ, WML_JOBS_DIR=str(work / "jobs"), WML_DATA_DIR=str(work / "data"),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    wml = [sys.executable, "-m", "wmlce_tools"]
    grid = ["--param", "i=" + ",".join(map(str, range(a.trials)))]
    sweep = [*wml, "sweep", "--site", "local-slurm", "--nodes", "1", "-t", "1", "--max-running", "2", *grid]
    rows = {"sweep (render + write + sbatch)": [], "sweep --dry-run": [], "submit (one job)": []}
    for _ in range(a.repeat):
        wall, out = timed([*sweep, "--json", str(prog), "--i", "{i}"], work, env)
        rows["sweep (render + write + sbatch)"].append(wall)
        info = json.loads(out.splitlines()[-1])
        assert info["trials"] == a.trials and info["mode"] == "array", info
        timed([*wml, "cancel", info["run_id"]], work, env)
        deadline = time.monotonic() + 60
        while subprocess.run(["squeue", "-h", "-r", "-j", info["job_id"]], capture_output=True, text=True,
                             env=env).stdout.strip():
            if time.monotonic() > deadline:
                sys.exit(f"array {info['job_id']} still queued 60 s after wml cancel")
            time.sleep(0.2)
        rows["sweep --dry-run"].append(timed([*sweep, "--dry-run", str(prog), "--i", "{i}"], work, env)[0])
        one = [*wml, "submit", "--site", "local-slurm", "--nodes", "1", "-t", "1", "--json", str(prog)]
        wall, out = timed(one, work, env)
        rows["submit (one job)"].append(wall)
        timed([*wml, "cancel", json.loads(out.splitlines()[-1])["job_id"]], work, env)
    print(f"{a.trials} trials, {a.repeat} repeats, {os.cpu_count()} CPUs; wall time in seconds")
    print(f"{'command':36} {'median':>7} {'max':>7}")
    for name, xs in rows.items():
        print(f"{name:36} {statistics.median(xs):7.2f} {max(xs):7.2f}")


if __name__ == "__main__":
    main()
