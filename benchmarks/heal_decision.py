"""ddlrun's hung/lost decision at 10,000 ranks (issue 61; wmlce_tools/runstats/liveness.py), on
simulated heartbeats: every rank's beat file parsed from its JSON text, the Watch updated, the
stalled ranks decided (three hung outside a collective, the rest waiting in one), the ranks that
failed first picked from 10,000 exit reports, and the lost nodes from the reports of all but
one node.  Also: reading the 10,000 beat files from a directory (tmpfs), once.

    python benchmarks/heal_decision.py [--ranks 10000] [--ranks-per-node 8] [--repeat 5]

Target: the decision in under 1 s.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wmlce_tools.runstats import liveness  # noqa: E402


def beat_text(rank: int, steps: int, phase: str, now: float) -> str:
    return json.dumps({"format": 1, "rank": rank, "steps": steps, "step_base": 1000, "median_s": 0.2,
                       "limit_s": 600.0, "phase": phase, "since": now, "at": now, "first_at": now - 500,
                       "pid": 1000 + rank, "host": f"nid{rank // 8:05d}"}, separators=(",", ":"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=10000)
    p.add_argument("--ranks-per-node", type=int, default=8)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    n, rpn = a.ranks, a.ranks_per_node
    hung = {17, 4242, n - 1}
    t_wall = time.time()
    first = [beat_text(r, 300, "step", t_wall) for r in range(n)]
    later = [beat_text(r, 300 if r in hung else 301, "step" if r in hung else "collective", t_wall + 700)
             for r in range(n)]
    reports = [liveness.Report(r, 137 if r // rpn == 5 else 143, 10.0 + (0.001 * r if r // rpn == 5 else 3.0))
               for r in range(n)]
    reported = [r for r in range(n) if r // rpn != 7]
    timings = {"parse": [], "decide": [], "first": [], "lost": []}
    walls, cpus = [], []
    for _ in range(a.repeat):
        watch = liveness.Watch(n)
        w0, c0 = time.perf_counter(), time.process_time()
        t0 = time.perf_counter()
        beats = [liveness.parse_beat(t) for t in first]
        t1 = time.perf_counter()
        watch.update(beats, now=0.0)
        beats2 = [liveness.parse_beat(t) for t in later]
        t2 = time.perf_counter()
        watch.update(beats2, now=1.0)
        stall = watch.stalled(now=700.0, slack_s=2.0)
        t3 = time.perf_counter()
        firsts = liveness.failed_first(reports)
        t4 = time.perf_counter()
        lost = liveness.lost_nodes(n, rpn, reported)
        t5 = time.perf_counter()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        assert set(stall.hung.tolist()) == hung, stall.hung
        assert len(stall.waiting) == n - len(hung)
        assert {r.rank // rpn for r in firsts} == {5} and lost == [7], (firsts[:3], lost)
        timings["parse"].append(t1 - t0)
        timings["decide"].append(t3 - t2)
        timings["first"].append(t4 - t3)
        timings["lost"].append(t5 - t4)
    d = Path(tempfile.mkdtemp(prefix="heal-decision-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    for r, text in enumerate(later):
        (d / f"rank{r}.beat").write_text(text)
    t0 = time.perf_counter()
    read = liveness.read_beats(d, n)
    t_read = time.perf_counter() - t0
    assert sum(b is not None for b in read) == n
    med = {k: statistics.median(v) for k, v in timings.items()}
    total = med["parse"] + med["decide"] + med["first"] + med["lost"]
    print(f"{n} ranks, {rpn} per node, median of {a.repeat} (wall): parse one scan's beats {med['parse'] * 1e3:.1f} ms, "
          f"update + decide {med['decide'] * 1e3:.1f} ms, failed first {med['first'] * 1e3:.1f} ms, lost nodes "
          f"{med['lost'] * 1e3:.2f} ms: the decision from one scan {total * 1e3:.0f} ms (target 1000 ms)")
    print(f"the whole round (two scans parsed and decided, the reports, the lost nodes): wall median "
          f"{statistics.median(walls) * 1e3:.0f} ms, CPU median {statistics.median(cpus) * 1e3:.0f} ms")
    print(f"reading the {n} beat files from {d}: {t_read * 1e3:.0f} ms once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
