"""ddlrun's output path under Open MPI: this tree (whole lines, --tag-output untagged by ddlrun)
against another tree of wml (``--before DIR``), 3 ranks printing LINES lines of 200 bytes each.

    git archive a6dff7d wmlce_tools ddl_runtime ddl.py site_configs templates pyproject.toml | tar -x -C /tmp/before
    python benchmarks/ddlrun_output.py --before /tmp/before [--lines 20000] [--repeat 5]

The two trees run interleaved, round by round (load on a shared box hits both alike); output
goes to a pipe that is read to its end, as a terminal or a job's log would take it.  Reports
each tree's median wall time and CPU time (ddlrun, mpiexec and the ranks: the children's user +
sys), and after/before.  Needs Debian's Open MPI (/usr/bin/mpiexec.openmpi).
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SHOW = HERE / "tests" / "ddlrun" / "programs" / "show_env.py"
OPENMPI = "/usr/bin/mpiexec.openmpi"
ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_btl": "self,vader",
       "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def once(tree: Path, lines: int) -> tuple:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WML_", "DDL_"))}
    env.update(ENV, PYTHONPATH=str(tree), LINES=str(lines))
    argv = [sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--mpiexec", OPENMPI, "-n", "3", "--oversubscribe",
            sys.executable, str(SHOW)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # cwd outside both trees: `python -m` puts the working directory first on sys.path
    proc = subprocess.run(argv, env=env, cwd=tempfile.gettempdir(), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = len(re.findall(rb"^\[\d\] line-\d+-\d+-x{200}$", proc.stdout, re.M))
    if tree == HERE and got != 3 * lines:     # (a6dff7d's Open MPI output cut and mixed some)
        sys.exit(f"{tree}: {got} lines of {3 * lines}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="a tree holding the other wml (wmlce_tools, ddl_runtime)")
    ap.add_argument("--lines", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    if not os.path.exists(OPENMPI):
        sys.exit(f"{OPENMPI} not found (apt-get install openmpi-bin)")
    trees = {"before": Path(a.before).resolve(), "after": HERE}
    times = {name: [] for name in trees}
    for _ in range(a.repeat):
        for name, tree in trees.items():
            times[name].append(once(tree, a.lines))
    med = {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for name, t in times.items()}
    for name, (wall, cpu) in med.items():
        print(f"{name:6}  wall {wall:6.2f} s  cpu {cpu:6.2f} s  ({a.repeat} runs, 3 ranks x {a.lines} lines of 200 B)")
    print(f"after/before: wall {med['after'][0] / med['before'][0]:.2f}x, cpu {med['after'][1] / med['before'][1]:.2f}x")


if __name__ == "__main__":
    main()
