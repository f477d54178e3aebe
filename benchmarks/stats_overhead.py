"""What the runtime's per-rank record (ddl_runtime/core/stats.py; issues 51 and 59) costs a small
training step: torch's DistributedOptimizer on a 64-128-10 MLP, batch 256 (a step of a few ms on
a CPU), with the record ("new": every collective call counting its time, each agreement carrying
the rank's arrival, end_step() at each step) and without it ("old": core.stats.CURRENT unset, so
no collective counts and no agreement carries an arrival, and no end_step()), in alternating
blocks (ABBA) of one run.

    mpiexec -n 2 python benchmarks/stats_overhead.py [--blocks 21] [--steps 50]

Prints rank 0's median step of each kind and new/old, then what the record adds per call, alone:
a counted collective call (the `collective` wrapper around a call that does nothing), an
arrival carried (arrival() + arrived()), and end_step(), and from those and how many of each a
step makes (counted by the record's clock reads in a block of its own) the record's work a
step.  Target: at most 1 % of a small step.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import ddl_runtime.torch as ddl  # noqa: E402
from _timing import SmallStep  # noqa: E402
from ddl_runtime.core import stats as core_stats  # noqa: E402
from ddl_runtime.core.stats import RunStats, collective  # noqa: E402


class _NoRecord:
    def end_step(self, nbytes: int = 0) -> None:
        pass


def per_call(fn, number: int = 20000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=21)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--noise", action="store_true",
                   help="also time a third kind, end_step() alone (under 1 us): how far apart this machine puts "
                        "two kinds that cost the same")
    a = p.parse_args()
    if a.blocks < 2 or a.steps < 1:
        p.error("--blocks >= 2 and --steps >= 1")
    ddl.init()
    step = SmallStep(ddl)
    model, opt = step.model, step.opt
    record = opt._ddl_stats
    assert core_stats.CURRENT is record

    def use(kind: str) -> None:
        core_stats.CURRENT = record if kind == "new" else None
        opt._ddl_stats = _NoRecord() if kind == "old" else record

    def block() -> float:
        return step.block(a.steps)

    kinds = ["new", "old"] + (["end"] if a.noise else [])
    use("new")
    block()                                   # warm-up
    times = {k: [] for k in kinds}
    arrivals = record.arrivals
    for i in range(a.blocks):
        for kind in (kinds if i % 2 == 0 else kinds[::-1]):      # ABBA: no kind always first
            use(kind)
            times[kind].append(block())
    use("new")
    carried = (record.arrivals - arrivals) / (a.blocks * a.steps)
    reads = [0]                              # then, apart: how many counted calls a step makes

    def counting_clock() -> float:
        reads[0] += 1
        return time.perf_counter()

    record.clock = counting_clock
    block()
    record.clock = time.perf_counter
    calls = (reads[0] / a.steps - 1) / 2     # two reads a counted call, one for end_step()
    if ddl.rank() == 0:
        new, old = statistics.median(times["new"]), statistics.median(times["old"])
        st = core_stats.CURRENT = RunStats(0, 2, None)
        nothing = collective(lambda: None)
        counted = per_call(nothing)
        core_stats.CURRENT = None
        bare = per_call(nothing)
        core_stats.CURRENT = st
        arrival = per_call(lambda: st.arrived(st.arrival(), 0))
        end = per_call(lambda: st.end_step(1 << 20))
        core_stats.CURRENT = record
        print(f"step with the record {new * 1e3:.3f} ms, without {old * 1e3:.3f} ms (median of {a.blocks} blocks of "
              f"{a.steps} steps each): new/old {new / old:.4f}; {carried:.1f} arrivals carried a step")
        if a.noise:
            print(f"end_step() alone / old: {statistics.median(times['end']) / old:.4f} (the noise between kinds)")
        print(f"alone: a counted collective call +{(counted - bare) * 1e6:.2f} us, an arrival carried "
              f"{arrival * 1e6:.2f} us, end_step() {end * 1e6:.2f} us: "
              f"{100 * (counted - bare) / old:.3f} %, {100 * arrival / old:.3f} %, {100 * end / old:.3f} % of the step")
        work = calls * (counted - bare) + carried * arrival + end
        print(f"the record's work a step, from its parts ({calls:.1f} counted calls, {carried:.1f} arrivals, one "
              f"end_step()): {work * 1e6:.2f} us = {100 * work / old:.3f} % of the step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
