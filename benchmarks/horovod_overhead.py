"""Overhead of the Horovod layer (ddl_runtime.horovod.torch) over the native ddl_runtime calls.

Run on real ranks:  ddlrun -n 2 python benchmarks/horovod_overhead.py [--rounds 7] [--calls 20]

Pairs, each measured as time per call, every method interleaved round by round (so load on a
shared box hits all alike), median of the rounds:

* allreduce of one float32 tensor (1 KB and 4 MB), average, in place:
  ``ddl_runtime.allreduce(t, op="avg")`` vs ``hvd.allreduce_(t, op=hvd.Average)``;
* a training step (backward + step, SGD) of an MLP with ~1.1 M parameters in 6 tensors:
  ``ddl_runtime.torch.DistributedOptimizer`` vs ``hvd.DistributedOptimizer``;
* allreduce against ``ddl_runtime.allreduce_n([t], op="avg")`` (1 KB and 4 MB, in place):
  ``hvd.allreduce(t, op=hvd.Average)`` (a new tensor) and ``hvd.grouped_allreduce([t])``;
* the digits CNN's (examples/train_digits.py) gradient exchange alone: fresh gradient tensors
  (as backward leaves them after ``zero_grad()``), then ``synchronize()``, native vs Horovod,
  once with the small bucket flat (``FlatAllreduce``, the default) and once a tensor at a time
  (optimizers built under ``DDL_FLAT_BUCKETS=0``).

Rank 0 prints a table and, with ``--json FILE``, writes the figures.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from _timing import report_pairs, select_pairs, time_interleaved

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


def _digits_exchange(make_optimizer, flat: bool):
    """One step's gradient exchange of the digits CNN: fresh gradient tensors, synchronize()."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import train_digits

    torch.manual_seed(0)
    model = train_digits.DigitsNet()
    os.environ["DDL_FLAT_BUCKETS"] = "1" if flat else "0"
    try:
        opt = make_optimizer(torch.optim.SGD(model.parameters(), lr=0.0), named_parameters=model.named_parameters())
    finally:
        del os.environ["DDL_FLAT_BUCKETS"]
    for hook in opt._ddl_hooks:  # synchronize() alone launches the buckets
        hook.remove()
    params = list(model.parameters())
    grads = [torch.randn_like(p) for p in params]

    def step():
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.synchronize()
        opt._ddl_synced = False
        opt._ddl_reset()
    return step


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=20, help="calls per method per round")
    p.add_argument("--json", dest="json_path")
    p.add_argument("--only", help="run only the pairs whose native row contains this text")
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
        "allreduce_n 1 KB: ddl_runtime.allreduce_n": lambda: ddl.allreduce_n([small], op="avg", names=["s"]),
        "allreduce_n 1 KB: hvd.allreduce": lambda: hvd.allreduce(small, op=hvd.Average, name="small_new"),
        "allreduce_n 1 KB: ddl_runtime.allreduce_n ": lambda: ddl.allreduce_n([small], op="avg", names=["s"]),
        "allreduce_n 1 KB: hvd.grouped_allreduce": lambda: hvd.grouped_allreduce([small], op=hvd.Average,
                                                                                  name="small_group"),
        "allreduce_n 4 MB: ddl_runtime.allreduce_n": lambda: ddl.allreduce_n([large], op="avg", names=["l"]),
        "allreduce_n 4 MB: hvd.allreduce": lambda: hvd.allreduce(large, op=hvd.Average, name="large_new"),
        "allreduce_n 4 MB: ddl_runtime.allreduce_n ": lambda: ddl.allreduce_n([large], op="avg", names=["l"]),
        "allreduce_n 4 MB: hvd.grouped_allreduce": lambda: hvd.grouped_allreduce([large], op=hvd.Average,
                                                                                  name="large_group"),
        "MLP step: ddl_runtime.torch.DistributedOptimizer": lambda: _train_step(m_native, opt_native, x, y),
        "MLP step: hvd.DistributedOptimizer": lambda: _train_step(m_hvd, opt_hvd, x, y),
        "digits exchange, flat: ddl_runtime.torch": _digits_exchange(native.DistributedOptimizer, True),
        "digits exchange, flat: hvd": _digits_exchange(hvd.DistributedOptimizer, True),
        "digits exchange, per tensor: ddl_runtime.torch": _digits_exchange(native.DistributedOptimizer, False),
        "digits exchange, per tensor: hvd": _digits_exchange(hvd.DistributedOptimizer, False),
    }
    methods = select_pairs(methods, a.only)
    times = time_interleaved(methods, a.rounds, a.calls, hvd.barrier)
    if hvd.rank() == 0:
        report_pairs(times, hvd.size(), a.rounds, a.calls, a.json_path, name_width=52)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
