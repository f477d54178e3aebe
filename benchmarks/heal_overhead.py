"""What hang detection (ddlrun --restarts: the rank's heartbeat, ddl_runtime/core/heartbeat.py) costs
a small training step: torch's DistributedOptimizer on a 64-128-10 MLP, batch 256 (a step of a few
ms on a CPU), with the heartbeat ("new": a store of the step count into a shared mapping every step,
the beat file rewritten and the stack dump re-armed at most once a second) and without it ("old":
RunStats as before), in alternating blocks of one run.

    mpiexec -n 2 python benchmarks/heal_overhead.py [--blocks 21] [--steps 50] [--control]

--control runs both kinds without the heartbeat (an A/A run: what the machine's load alone does
to the ratio).

Prints rank 0's median step of each kind, new/old, end_step() alone with and without the heartbeat
per call, and one beat write (amortised over the steps of a second).  Target (issue 61): < 1 %.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import ddl_runtime.torch as ddl  # noqa: E402
from _timing import SmallStep  # noqa: E402
from ddl_runtime.core.heartbeat import BEAT_S, Heartbeat  # noqa: E402
from ddl_runtime.core.stats import RunStats  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=21)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--control", action="store_true", help="both kinds without the heartbeat: the machine's noise")
    a = p.parse_args()
    if a.blocks < 2 or a.steps < 1:
        p.error("--blocks >= 2 and --steps >= 1")
    ddl.init()
    step = SmallStep(ddl)
    model, opt = step.model, step.opt
    record = opt._ddl_stats
    beat = Heartbeat(tempfile.mkdtemp(prefix="heal-bench-"), ddl.rank(), floor_s=600.0, clock=record.clock)

    def block() -> float:
        return step.block(a.steps)

    record.beat = beat
    block()                                   # warm-up (and the warm-up steps of the heartbeat)
    times = {True: [], False: []}
    for i in range(a.blocks * 2):
        new = (i % 2 == 0) if (i // 2) % 2 == 0 else (i % 2 == 1)     # ABBA: neither kind always first
        record.beat = beat if new and not a.control else None
        times[new].append(block())
    record.beat = None
    if ddl.rank() == 0:
        new, old = statistics.median(times[True]), statistics.median(times[False])
        plain = RunStats(0, 2, None)
        watched = RunStats(0, 2, None)
        hb = Heartbeat(tempfile.mkdtemp(prefix="heal-bench-"), 0, floor_s=600.0, clock=watched.clock)
        watched.beat = hb
        for _ in range(10):
            watched.end_step(1 << 20)
        hb.due = float("inf")                 # end_step's own cost: the store and the comparison
        per_call = {k: min(timeit.repeat(lambda s=s: s.end_step(1 << 20), number=20000, repeat=5)) / 20000
                    for k, s in (("old", plain), ("new", watched))}
        write = min(timeit.repeat(lambda: hb.write(watched), number=200, repeat=5)) / 200
        hb.close()
        beat.close()
        amortised = write / max(1.0, BEAT_S / old)      # one write per BEAT_S of steps
        extra = per_call["new"] - per_call["old"] + amortised
        print(f"step with the heartbeat {new * 1e3:.3f} ms, without {old * 1e3:.3f} ms (median of {a.blocks} blocks "
              f"of {a.steps} steps each): new/old {new / old:.4f}")
        print(f"end_step() alone: {per_call['new'] * 1e6:.2f} us with the heartbeat, {per_call['old'] * 1e6:.2f} us "
              f"without; one beat write {write * 1e6:.0f} us, once a second: {amortised * 1e6:.2f} us a step; "
              f"the heartbeat adds {extra * 1e6:.2f} us = {100 * extra / old:.3f} % of the step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
