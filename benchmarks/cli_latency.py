"""Wall time of `wml render` and `wml submit --dry-run` (issue: well under 0.25 s).

    python benchmarks/cli_latency.py [--repeat 20]

Runs each command REPEAT times through the installed `wml` console script (its own
interpreter, as a user runs it), interleaved with a bare `python -c pass` so the machine's
load shows in the same table.  Reports median and 90th percentile wall time, and CPU time
(user + sys of the child), which is less sensitive to other processes on a shared box.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(argv, cwd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    beside = Path(sys.executable).parent / "wml"  # the venv's script, not a pyenv/shell shim
    wml = str(beside) if beside.exists() else shutil.which("wml") or sys.exit("wml is not installed (pip install .)")
    py = Path(open(wml).readline()[2:].strip())  # the console script's own interpreter
    work = Path(tempfile.mkdtemp())
    (work / "train.py").write_text("print('hi')\n")
    env = dict(os.environ, WML_JOBS_DIR=str(work / "jobs"))
    cases = {
        "python -c pass (floor)": [str(py), "-c", "pass"],
        "wml render --site summit --nodes 18 train.py": [wml, "render", "--site", "summit", "--nodes", "18", "train.py"],
        "wml submit --dry-run --site theta --nodes 128": [wml, "submit", "--dry-run", "--site", "theta", "--nodes", "128", "train.py"],
        "wml render (local site, detected)": [wml, "render", "--nodes", "2", "train.py"],
    }
    for argv in cases.values():  # warm the page cache and wml's parsed-site cache
        run(argv, work, env)
    results = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, argv in cases.items():
            results[name].append(run(argv, work, env))
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}, python {platform.python_version()}, repeat {args.repeat}")
    print(f"| command | median wall (s) | p90 wall (s) | median CPU (s) |")
    print(f"|---|---|---|---|")
    for name, rows in results.items():
        walls = sorted(w for w, _ in rows)
        cpus = sorted(c for _, c in rows)
        p90 = walls[int(0.9 * (len(walls) - 1))]
        print(f"| `{name}` | {statistics.median(walls):.3f} | {p90:.3f} | {statistics.median(cpus):.3f} |")


if __name__ == "__main__":
    main()
