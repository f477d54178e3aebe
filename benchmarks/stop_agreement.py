"""Per-step cost of the walltime stop agreement (ddl_runtime.checkpoint.agree) on the digits step.

Run on real ranks:  ddlrun -n 2 python benchmarks/stop_agreement.py [--rounds 9] [--calls 40]

One training step of examples/train_digits.py's CNN (batch 64 per rank, ddl_runtime.torch's
DistributedOptimizer, SGD), timed alone and followed by ``checkpoint.agree(step)``: once as
Checkpointer.step_end calls it (the decision rode in the step's last gradient bucket: no
communication), once calling agree() a second time, which finds no folded decision and runs its
own 3-element allreduce (what a loop without a DistributedOptimizer pays).  Every method is
interleaved round by round (benchmarks/_timing.py); rank 0 prints each pair with the overhead.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch
from _timing import report_pairs, time_interleaved

import ddl_runtime as ddl
import ddl_runtime.torch as native
from ddl_runtime import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import train_digits  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--calls", type=int, default=40, help="steps per method per round")
    p.add_argument("--json", dest="json_path")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    native.init()
    torch.manual_seed(0)
    model = train_digits.DigitsNet()
    opt = native.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                      named_parameters=model.named_parameters())
    x_train, y_train, _, _ = train_digits.load_data()
    x, y = x_train[:64], y_train[:64]
    counter = itertools.count()

    def step():
        train_digits.train_step(model, opt, x, y)

    def step_agree():
        step()
        checkpoint.agree(next(counter))

    def step_agree_collective():
        step_agree()
        checkpoint.agree(next(counter) - 1)  # nothing folded left: its own allreduce

    methods = {
        "digits step": step,
        "digits step + agree (folded in the gradient bucket)": step_agree,
        "digits step ": step,
        "digits step + agree + agree (2nd: own allreduce)": step_agree_collective,
    }
    times = time_interleaved(methods, a.rounds, a.calls, ddl.barrier)
    if ddl.rank() == 0:
        report_pairs(times, ddl.size(), a.rounds, a.calls, a.json_path, name_width=52)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
