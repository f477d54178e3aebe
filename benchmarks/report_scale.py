"""How long ``wml report`` takes on a large job: synthetic records of N ranks (default 1,000, 4 per
node, 1,100 steps: every rank's ring of 1,024 steps full), written by the runtime's own writer
(ddl_runtime/core/stats.py, on a made-up clock), one rank slowed by 30 %.

    python benchmarks/report_scale.py [--ranks 1000] [--ranks-per-node 4] [--slow 617] [--repeat 3] [--keep DIR]

Prints the time to write the records, then for each repeat the time of the report in this
process (read + analyse + terminal summary + HTML page) and of one ``wml report DIR --html``
command (a new interpreter, as a user runs it); the report's first lines name the straggler.
Target (issue 51): a 1,000-rank record reported in under 2 s.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ddl_runtime.core import stats as core_stats  # noqa: E402
from ddl_runtime.core.stats import RunStats, collective  # noqa: E402


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write_records(directory: Path, ranks: int, per_node: int, steps: int, slow: int, seed: int = 0) -> None:
    """Each step: rank r computes c_r (100 ms +- 3 %, the slow rank 1.3x), then enters the step's
    reduction, whose agreement carries its arrival (its own work since the last one: c_r) and
    hands back the last rank's, waits there for the slowest rank, and 5 ms of transfer; the
    runtime's own counting (core/stats.py: `collective`, `arrival`, `arrived`) on a made-up clock."""
    rng = random.Random(seed)
    compute = [[0.1 * (1.3 if r == slow else 1.0) * rng.uniform(0.97, 1.03) for _ in range(steps)]
               for r in range(ranks)]
    slowest = [max(compute[r][s] for r in range(ranks)) for s in range(steps)]
    for r in range(ranks):
        clock = _Clock()
        st = core_stats.CURRENT = RunStats(r, ranks, str(directory), interval_s=1e12, clock=clock)
        st.placement = {"node_index": r // per_node, "nodes": -(-ranks // per_node), "local_rank": r % per_node,
                        "local_size": per_node, "gpu": r % per_node, "cores": f"{(r % per_node) * 8}-{(r % per_node) * 8 + 7}",
                        "visible_gpus": None}

        @collective
        def reduction(s: int) -> None:
            st.arrived(st.arrival(), int(slowest[s] * 1e9))
            clock.now += slowest[s] - compute[r][s] + 0.005

        for s in range(steps):
            clock.now += compute[r][s]
            reduction(s)
            st.end_step(25 << 20)
        st.write("finished", {"host": f"n{r // per_node:04d}"})
    core_stats.CURRENT = None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=1000)
    p.add_argument("--ranks-per-node", type=int, default=4)
    p.add_argument("--steps", type=int, default=1100)
    p.add_argument("--slow", type=int, default=617)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--keep", help="write the records here (and keep them)")
    a = p.parse_args()
    if a.ranks < 2 or a.ranks_per_node < 1 or a.steps < 2 or a.repeat < 1 or not 0 <= a.slow < a.ranks:
        p.error("--ranks >= 2, --ranks-per-node >= 1, --steps >= 2, --repeat >= 1, 0 <= --slow < --ranks")
    tmp = None if a.keep else tempfile.TemporaryDirectory()
    base = Path(a.keep or tmp.name)
    stats = base / "stats"
    t0 = time.perf_counter()
    write_records(stats, a.ranks, a.ranks_per_node, a.steps, a.slow)
    print(f"records: {a.ranks} ranks x {a.steps} steps written in {time.perf_counter() - t0:.2f} s "
          f"({sum(f.stat().st_size for f in stats.iterdir()) / 2**20:.1f} MiB)")
    from wmlce_tools.report import report, summary, write_html

    inproc, command, cpu = [], [], []
    for i in range(a.repeat):
        t0 = time.perf_counter()
        rep = report(str(stats))
        text = summary(rep)
        write_html(rep, base / "report.html")
        inproc.append(time.perf_counter() - t0)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        t0 = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-m", "wmlce_tools", "report", str(stats), "--html",
                               str(base / "report-cmd.html")], capture_output=True, text=True, env=env)
        command.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if proc.returncode:
            sys.stderr.write(proc.stderr)
            return 1
        if i == 0:
            print("\n".join(text.splitlines()[1:3]))
    print(f"report in process (read, analyse, summary, page): median {statistics.median(inproc):.2f} s, "
          f"max {max(inproc):.2f} s")
    print(f"wml report DIR --html (a new process): median {statistics.median(command):.2f} s, max {max(command):.2f} s "
          f"wall; CPU (user + sys) median {statistics.median(cpu):.2f} s; load {os.getloadavg()[0]:.1f}; page {(base / 'report.html').stat().st_size / 2**20:.1f} MiB")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
