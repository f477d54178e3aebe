"""Wall time of `wml render` and `wml submit --dry-run` (issue 60: within 2x `python -c pass`).

    python benchmarks/cli_latency.py [--repeat 20]

Runs each command REPEAT times through the installed `wml` console script (its own
interpreter, as a user runs it), interleaved with a bare `python -c pass` so the machine's
load shows in the same table.  Reports median and 90th percentile wall time, and CPU time
(user + sys of the child), which is less sensitive to other processes on a shared box.

    python benchmarks/cli_latency.py --trees OLD NEW [--repeat 20]

Old code beside new in one run: each case as ``python -m wmlce_tools ...`` with PYTHONPATH set to
each source tree in turn (e.g. ``git worktree add /tmp/old main``), interleaved, with the ratio
new / old of the medians and each command's median over ``python -c pass``'s (the floor).

The commands run with Python's bytecode cache on (PYTHONDONTWRITEBYTECODE is dropped from their
environment), as a user's do: the warm-up run writes the .pyc files.
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
    ap.add_argument("--trees", nargs=2, metavar=("OLD", "NEW"), help="compare two source trees")
    args = ap.parse_args()
    if args.trees:
        return compare(args.trees, args.repeat)
    beside = Path(sys.executable).parent / "wml"  # the venv's script, not a pyenv/shell shim
    wml = str(beside) if beside.exists() else shutil.which("wml") or sys.exit("wml is not installed (pip install .)")
    py = Path(open(wml).readline()[2:].strip())  # the console script's own interpreter
    work = Path(tempfile.mkdtemp())
    (work / "train.py").write_text("print('hi')\n")
    env = dict(os.environ, WML_JOBS_DIR=str(work / "jobs"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cases = {
        "python -c pass (floor)": [str(py), "-c", "pass"],
        "wml render --site summit --nodes 18 -P abc train.py": [wml, "render", "--site", "summit", "--nodes", "18",
                                                               "-P", "abc", "train.py"],
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


def compare(trees, repeat: int) -> None:
    work = Path(tempfile.mkdtemp())
    (work / "train.py").write_text("print('hi')\n")
    floor = "python -c pass (floor)"
    cases = {
        floor: None,
        "wml --help": ["--help"],
        "wml render --site summit --nodes 18 -P abc train.py": ["render", "--site", "summit", "--nodes", "18", "-P", "abc",
                                                               "train.py"],
        "wml submit --dry-run --site theta --nodes 128 train.py": ["submit", "--dry-run", "--site", "theta", "--nodes",
                                                                  "128", "train.py"],
        "wml render --chain 3 --site frontier -N 2 -A abc -t 2h train.py": [
            "render", "--chain", "3", "--site", "frontier", "-N", "2", "-A", "abc", "-t", "2h", "train.py"],
        "wml render (local site, detected)": ["render", "--nodes", "2", "train.py"],
    }
    envs = [dict(os.environ, PYTHONPATH=str(Path(t).resolve()), WML_JOBS_DIR=str(work / "jobs")) for t in trees]
    for env in envs:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = lambda case: ([sys.executable, "-c", "pass"] if cases[case] is None  # noqa: E731
                         else [sys.executable, "-m", "wmlce_tools", *cases[case]])
    for case in cases:  # warm the page cache and wml's caches, for both trees
        for env in envs:
            run(argv(case), work, env)
    results = {(case, i): [] for case in cases for i in range(2)}
    for _ in range(repeat):
        for case in cases:
            for i, env in enumerate(envs):
                results[(case, i)].append(run(argv(case), work, env))
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}, python {platform.python_version()}, repeat {repeat}")
    med = {key: (statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows))
           for key, rows in results.items()}
    print("| command | old median wall (s) | new median wall (s) | new/old wall | old CPU (s) | new CPU (s) | new/old CPU "
          "| old wall / floor | new wall / floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        (ow, oc), (nw, nc) = med[(case, 0)], med[(case, 1)]
        print(f"| `{case}` | {ow:.3f} | {nw:.3f} | {nw / ow:.2f} | {oc:.3f} | {nc:.3f} | {nc / oc:.2f} "
              f"| {ow / med[(floor, 0)][0]:.1f}x | {nw / med[(floor, 1)][0]:.1f}x |")


if __name__ == "__main__":
    main()
