"""Overhead of the Horovod layer (ddl_runtime.horovod.torch) over the native ddl_runtime calls.

Run on real ranks:  ddlrun -n 2 python benchmarks/horovod_overhead.py [--rounds 7] [--calls 20]

Pairs, each measured as time per call, every method interleaved round by round (so load on a
shared box hits all alike), median of the rounds:

* allreduce of one float32 tensor (1 KB and 4 MB), average, in place:
  ``ddl_runtime.allreduce(t, op="avg")`` vs ``hvd.allreduce_(t, op=hvd.Average)``;
* a training step (backward + step, SGD) of an MLP with ~1.1 M parameters in 6 tensors:
  ``ddl_runtime.torch.DistributedOptimizer`` vs ``hvd.DistributedOptimizer``.

Rank 0 prints a table and, with ``--json FILE``, writes the figures.
"""
from __future__ import annotations

import argparse

import torch
from _timing import report_pairs, time_interleaved

import ddl_runtime as ddl
import ddl_runtime.horovod.torch as hvd
import ddl_runtime.torch as native


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512),
                               torch.nn.ReLU(), torch.nn.Linear(512, 10))


def _train_step(model, opt, x, y):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20, help="calls per method per round")
    p.add_argument("--json", dest="json_path")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    hvd.init()
    small, large = torch.ones(256), torch.ones(1 << 20)
    x, y = torch.randn(32, 512), torch.randint(0, 10, (32,))
    m_native, m_hvd = _mlp(), _mlp()
    opt_native = native.DistributedOptimizer(torch.optim.SGD(m_native.parameters(), lr=1e-3),
                                             named_parameters=m_native.named_parameters())
    opt_hvd = hvd.DistributedOptimizer(torch.optim.SGD(m_hvd.parameters(), lr=1e-3),
                                       named_parameters=m_hvd.named_parameters())
    methods = {
        "allreduce 1 KB: ddl_runtime.allreduce": lambda: ddl.allreduce(small, op="avg", name="small"),
        "allreduce 1 KB: hvd.allreduce_": lambda: hvd.allreduce_(small, op=hvd.Average, name="small"),
        "allreduce 4 MB: ddl_runtime.allreduce": lambda: ddl.allreduce(large, op="avg", name="large"),
        "allreduce 4 MB: hvd.allreduce_": lambda: hvd.allreduce_(large, op=hvd.Average, name="large"),
        "MLP step: ddl_runtime.torch.DistributedOptimizer": lambda: _train_step(m_native, opt_native, x, y),
        "MLP step: hvd.DistributedOptimizer": lambda: _train_step(m_hvd, opt_hvd, x, y),
    }
    times = time_interleaved(methods, a.rounds, a.calls, hvd.barrier)
    if hvd.rank() == 0:
        report_pairs(times, hvd.size(), a.rounds, a.calls, a.json_path, name_width=52)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
