"""Wall time of ``ddlrun --dry-run`` inside fake full-machine allocations (issue 31 item 7).

    python benchmarks/ddlrun_plan_scale.py [--repeat 3] [--nodes 1000,9408,10624] [--only TEXT]
        [--baseline DIR] [--profile TEXT]

Each case runs the installed ``ddlrun`` (``python -m wmlce_tools.ddlrun.cli``, its own
interpreter, as a job script runs it) with a clean environment that looks like the inside of
an allocation, the way the tests fake one:
- Slurm on Frontier: ``SLURM_JOB_NODELIST=frontier[00001-NNNNN]``,
  ``SLURM_TASKS_PER_NODE=8(xN)`` (8 ranks per node, one per GCD; at most its 9,408 nodes);
- PBS Pro on Aurora: ``PBS_NODEFILE``, one line per node (``x4000c0s0b0n0`` style names),
  12 ranks per node (one per GPU tile); 10,624 nodes x 12 = 127,488 ranks;
- each rank's shim at start (``rankexec``: the rank's environment from ddlrun's settings), for
  the last rank of the Aurora job;
- plus ``wml render --site frontier|aurora --nodes N`` (the job script; capped at the largest
  job the site's queues take: 9,408 on Frontier, 2,048 in Aurora's prod queue).
Reports the child's CPU time (user + sys), which is less sensitive to other processes on a
shared box, and its wall time (median, min, max) over REPEAT rounds, next to a bare
``python -c pass`` measured in the same rounds.  ``--baseline DIR`` runs every case again with
an older tree first on PYTHONPATH, interleaved in the same rounds, so before/after is one run.  ``--profile CASE`` runs one case's plan
in-process under cProfile and prints the top functions instead.
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
from pathlib import Path
import time
from typing import Dict, List, Tuple

DEFAULT_NODES = (1000, 9408, 10624)
#: sites for ``wml render`` and the most nodes one of their queues takes (Aurora's prod: 2,048)
FRONTIER_NODES = 9408
RENDER_SITES = (("frontier", FRONTIER_NODES), ("aurora", 2048))


def aurora_host(i: int) -> str:
    """Aurora-like node names: x<rack>c<chassis>s<slot>b0n0 (rack of 64 nodes)."""
    rack, rest = divmod(i, 64)
    chassis, slot = divmod(rest, 8)
    return f"x{4000 + rack}c{chassis}s{slot}b0n0.hostmgmt2000.cm.aurora.alcf.anl.gov"


def cases(nodes: Tuple[int, ...], work: Path) -> Dict[str, Tuple[List[str], Dict[str, str]]]:
    py = sys.executable
    ddlrun = [py, "-m", "wmlce_tools.ddlrun.cli"]
    wml = [py, "-m", "wmlce_tools"]
    out: Dict[str, Tuple[List[str], Dict[str, str]]] = {"python -c pass (floor)": ([py, "-c", "pass"], {})}
    for n in sorted({min(n, FRONTIER_NODES) for n in nodes}):
        slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": f"frontier[00001-{n:05d}]",
                 "SLURM_NNODES": str(n), "SLURM_TASKS_PER_NODE": f"8(x{n})"}
        out[f"ddlrun --dry-run, Slurm frontier, {n} nodes x 8 = {8 * n} ranks"] = (
            ddlrun + ["--site", "frontier", "--dry-run", "python", "train.py"], slurm)
    for n in nodes:
        nodefile = work / f"nodefile-{n}"
        nodefile.write_text("".join(aurora_host(i) + "\n" for i in range(n)))
        pbs = {"PBS_JOBID": "4242.aurora-pbs-0001", "PBS_NODEFILE": str(nodefile)}
        out[f"ddlrun --dry-run, PBS aurora, {n} nodes x 12 = {12 * n} ranks"] = (
            ddlrun + ["--site", "aurora", "--dry-run", "python", "train.py"], pbs)
    for n in nodes:   # what each rank's shim does at start: its own environment, from the same settings
        size, last = 12 * n, 12 * n - 1
        shim = [py, "-m", "wmlce_tools.ddlrun.rankexec", "--size", str(size), "--ranks-per-node", "12",
                "--binding", "per-rank", "--gpus", ";".join(map(str, range(12))), "--gpu-env", "ZE_AFFINITY_MASK",
                "--mode", f"p:12x{n}x1x1", "--master", f"{aurora_host(0)}:20000", "--output", "direct", "--", "true"]
        out[f"rank shim (rankexec), rank {last} of {size} (aurora, {n} nodes)"] = (shim, {
            "PALS_RANKID": str(last), "PALS_LOCAL_RANKID": "11", "PMI_RANK": str(last), "PMI_SIZE": str(size)})
    for site, most in RENDER_SITES:   # the largest job each site's queues take
        for n in sorted({min(n, most) for n in nodes}):
            out[f"wml render --site {site} --nodes {n}"] = (
                wml + ["render", "--site", site, "--nodes", str(n), "-P", "proj", "train.py"], {})
    return out


def clean_env(extra: Dict[str, str], work: Path) -> Dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(WML_JOBS_DIR=str(work / "jobs"), XDG_CONFIG_HOME=str(work / "config"))
    env.update(extra)
    return env


def run(argv: List[str], env: Dict[str, str], cwd: Path) -> Tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, len(p.stdout)


def profile(name: str, argv: List[str], env: Dict[str, str], cwd: Path) -> None:
    code = ("import cProfile, pstats, sys, runpy; sys.argv = ['ddlrun'] + sys.argv[1:];"
            "pr = cProfile.Profile(); pr.enable()\n"
            "try:\n    runpy.run_module(%r, run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "pr.disable(); sys.stdout = sys.__stderr__;"
            "pstats.Stats(pr, stream=sys.stderr).sort_stats('cumulative').print_stats(25)")
    module = argv[2]
    p = subprocess.run([argv[0], "-c", code % module, *argv[3:]], cwd=cwd, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    print(f"# cProfile of {name}")
    print(p.stderr)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="ddlrun-scale-"))
    try:
        measure(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(work: Path) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nodes", default=",".join(map(str, DEFAULT_NODES)),
                    help="node counts, comma-separated (default %(default)s)")
    ap.add_argument("--only", help="run only the cases whose name contains this text")
    ap.add_argument("--profile", metavar="TEXT", help="cProfile the first case whose name contains TEXT")
    ap.add_argument("--baseline", metavar="DIR", help="also run every case, interleaved, with DIR first on "
                    "PYTHONPATH: an older tree unpacked there (git archive COMMIT | tar -x -C DIR)")
    args = ap.parse_args()
    nodes = tuple(int(n) for n in args.nodes.split(","))
    (work / "train.py").write_text("print('hi')\n")
    todo = cases(nodes, work)
    if args.profile:
        name = next((n for n in todo if args.profile in n), None) or sys.exit(f"no case matches {args.profile!r}")
        argv, extra = todo[name]
        profile(name, argv, clean_env(extra, work), work)
        return
    if args.only:
        todo = {n: c for n, c in todo.items() if args.only in n or n.startswith("python")}
    trees = {"this tree": None}
    if args.baseline:
        trees["baseline"] = str(Path(args.baseline).resolve())
    results: Dict[Tuple[str, str], List[Tuple[float, float, int]]] = {
        (name, tree): [] for name in todo for tree in trees}
    for _ in range(args.repeat):   # rounds: load on a shared box hits every case and tree alike
        for name, (argv, extra) in todo.items():
            for tree, path in trees.items():
                env = clean_env(extra, work)
                if path:
                    env["PYTHONPATH"] = path
                results[name, tree].append(run(argv, env, work))
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}, python {platform.python_version()}, repeat {args.repeat}"
          + (f", baseline {args.baseline}" if args.baseline else ""))
    print("| command | tree | median CPU (s) | median wall (s) | min wall (s) | max wall (s) | output bytes |")
    print("|---|---|---|---|---|---|---|")
    for (name, tree), rows in results.items():
        walls = [r[0] for r in rows]
        cpu = statistics.median(r[1] for r in rows)
        ratio = ""
        if tree == "baseline":
            here = statistics.median(r[1] for r in results[name, "this tree"])
            ratio = f" ({cpu / here:.1f}x this tree's)" if here else ""
        print(f"| {name} | {tree} | {cpu:.3f}{ratio} | {statistics.median(walls):.3f} | {min(walls):.3f} | "
              f"{max(walls):.3f} | {rows[0][2]} |")


if __name__ == "__main__":
    main()
