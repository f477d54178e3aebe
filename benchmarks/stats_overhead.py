"""What the runtime's per-rank record (ddl_runtime/core/stats.py, issue 51) costs a small training
step: torch's DistributedOptimizer on a 64-128-10 MLP, batch 256 (a step of a few ms on a CPU),
with the record ("new") and without it ("old": the optimizer's synchronize() and step() as they
were before it, i.e. no clock reads and no end_step()), in alternating blocks of one run.

    mpiexec -n 2 python benchmarks/stats_overhead.py [--blocks 21] [--steps 50]

Prints rank 0's median step of each kind, new/old, and end_step() alone per call.
Target (issue 51): at most 1 % of a small step.
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
from ddl_runtime.core.stats import RunStats  # noqa: E402


class _NoRecord:
    def end_step(self, comm_s: float = 0.0, nbytes: int = 0) -> None:
        pass


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=21)
    p.add_argument("--steps", type=int, default=50)
    a = p.parse_args()
    if a.blocks < 2 or a.steps < 1:
        p.error("--blocks >= 2 and --steps >= 1")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ddl.init()
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = ddl.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    kind = type(opt)
    record = opt._ddl_stats

    def old_synchronize(self=opt):   # synchronize() before issue 51: no clock around the wait
        if self._ddl_size == 1 or self._ddl_synced:
            self._ddl_synced = True
            return
        self._ddl_wait_reductions()

    def use(new: bool) -> None:
        if new:
            opt.__dict__.pop("synchronize", None)
            opt._ddl_stats = record
        else:
            opt.synchronize = old_synchronize
            opt._ddl_stats = _NoRecord()

    def block() -> float:
        t0 = time.perf_counter()
        for _ in range(a.steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return (time.perf_counter() - t0) / a.steps

    use(True)
    block()                                   # warm-up
    times = {True: [], False: []}
    for i in range(a.blocks * 2):
        new = (i % 2 == 0) if (i // 2) % 2 == 0 else (i % 2 == 1)     # ABBA: neither kind always first
        use(new)
        times[new].append(block())
    assert type(opt) is kind
    if ddl.rank() == 0:
        new, old = statistics.median(times[True]), statistics.median(times[False])
        st = RunStats(0, 2, None)
        per_call = min(timeit.repeat(lambda: st.end_step(0.001, 1 << 20), number=20000, repeat=5)) / 20000
        print(f"step with the record {new * 1e3:.3f} ms, without {old * 1e3:.3f} ms (median of {a.blocks} blocks of "
              f"{a.steps} steps each): new/old {new / old:.4f}")
        print(f"end_step() alone: {per_call * 1e6:.2f} us a call = {100 * per_call / old:.3f} % of the step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
