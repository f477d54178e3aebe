"""Timing shared by the overhead benchmarks (run as scripts: ``benchmarks/`` is on sys.path).

Every method is timed as time per call, all methods interleaved round by round (so load on a
shared box hits all alike) after two warm-up calls each, with a barrier before each method's
batch of calls; the figure is the median over rounds.  Methods come in pairs, native then
Horovod, and rank 0 prints each pair with the Horovod layer's overhead.
"""
from __future__ import annotations

import json
import statistics
import time
from typing import Callable, Dict, List, Optional


def time_interleaved(methods: Dict[str, Callable[[], object]], rounds: int, calls: int,
                     barrier: Callable[[], None]) -> Dict[str, List[float]]:
    """Seconds per call of each method, one figure per round."""
    for fn in methods.values():  # warm up: plans, caches, tracing
        fn(), fn()
    times: Dict[str, List[float]] = {name: [] for name in methods}
    for _ in range(rounds):
        for name, fn in methods.items():
            barrier()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t0) / calls)
    return times


def select_pairs(methods: Dict[str, Callable[[], object]], only: Optional[str]) -> Dict[str, Callable[[], object]]:
    """The (native, Horovod) pairs whose native name contains `only` (all of them when None)."""
    names = list(methods)
    keep = [n for pair in zip(names[0::2], names[1::2]) if only is None or only in pair[0] for n in pair]
    return {n: methods[n] for n in keep}


def report_pairs(times: Dict[str, List[float]], ranks: int, rounds: int, calls: int, json_path: Optional[str],
                 name_width: int) -> None:
    """Print the (native, Horovod) pairs' medians and overheads; write all figures to ``json_path``."""
    medians = {name: statistics.median(v) for name, v in times.items()}
    names = list(times)
    print(f"ranks {ranks}, {rounds} rounds x {calls} calls, median time per call")
    for native_name, hvd_name in zip(names[0::2], names[1::2]):
        n, h = medians[native_name], medians[hvd_name]
        print(f"{native_name:{name_width}s} {n * 1e3:9.3f} ms")
        print(f"{hvd_name:{name_width}s} {h * 1e3:9.3f} ms   overhead {(h - n) * 1e6:+9.1f} us ({h / n:.3f}x)")
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({"ranks": ranks, "rounds": rounds, "calls": calls, "median_s": medians, "all_s": times},
                      fh, indent=1)


class SmallStep:
    """The record and heartbeat benchmarks' training step: torch's DistributedOptimizer (of
    ``ddl``, ddl_runtime.torch, already initialised) on a 64-128-10 MLP, batch 256, one thread (a
    step of a few ms on a CPU)."""

    def __init__(self, ddl) -> None:
        import torch

        self.torch = torch
        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        self.opt = ddl.DistributedOptimizer(torch.optim.SGD(self.model.parameters(), lr=0.01),
                                            named_parameters=self.model.named_parameters())
        self.x, self.y = torch.randn(256, 64), torch.randint(0, 10, (256,))

    def block(self, steps: int) -> float:
        """Seconds per step over ``steps`` steps."""
        t0 = time.perf_counter()
        for _ in range(steps):
            self.opt.zero_grad()
            self.torch.nn.functional.cross_entropy(self.model(self.x), self.y).backward()
            self.opt.step()
        return (time.perf_counter() - t0) / steps
