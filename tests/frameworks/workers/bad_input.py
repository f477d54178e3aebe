"""Run under mpiexec -n 2 with a case name: each case must raise the same clear DDLError on
every rank (naming the parameter), never hang.

Cases are caught and reported as `CASE <name>: <ErrorType>: <message>` by rank 0 so one launch
checks several; `--uncaught` re-raises the last one so the job must end with a non-zero exit.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import ddl_runtime.torch as ddl
from ddl_runtime.errors import DDLError


class Net(nn.Module):
    def __init__(self, hidden=16, extra=False):
        super().__init__()
        self.fc1 = nn.Linear(8, hidden)
        self.fc2 = nn.Linear(hidden, 4)
        self.extra = nn.Linear(8, 4) if extra else None

    def forward(self, x, use_extra=False):
        out = self.fc2(torch.relu(self.fc1(x)))
        if use_extra:
            out = out + self.extra(x)
        return out


def case_shape(rank):
    model = Net(hidden=16 if rank == 0 else 12)
    ddl.broadcast_parameters(model.state_dict(), root_rank=0)


def case_missing_param(rank):
    model = Net(extra=(rank == 1))
    ddl.broadcast_parameters(model.state_dict(), root_rank=0)


def case_none_grad(rank, **options):
    model = Net(extra=True)
    opt = ddl.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), **options)
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    for step in range(2):  # one good step first, then rank 1 skips the extra branch
        opt.zero_grad()
        F.cross_entropy(model(x, use_extra=(step == 0 or rank == 0)), y).backward()
        opt.step()


def case_none_grad_shared(rank):
    """The same with the gradients in shared memory: the None still shows, nothing hangs."""
    case_none_grad(rank, gradient_as_bucket_view=True)


def case_bucket_view_not_bool(rank):
    model = Net()
    ddl.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), gradient_as_bucket_view="yes")


def case_param_groups(rank):
    model = Net()
    if rank == 0:
        groups = [{"params": model.parameters()}]
    else:
        groups = [{"params": model.fc1.parameters()}, {"params": model.fc2.parameters(), "lr": 0.01}]
    ddl.DistributedOptimizer(torch.optim.SGD(groups, lr=0.1), named_parameters=model.named_parameters())


def case_group_lr(rank):
    model = Net()
    ddl.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1)),
                             named_parameters=model.named_parameters())


def case_optimizer_state_groups(rank):
    model = Net()
    groups = [{"params": model.parameters()}] if rank == 0 else \
        [{"params": model.fc1.parameters()}, {"params": model.fc2.parameters()}]
    ddl.broadcast_optimizer_state(torch.optim.SGD(groups, lr=0.1), root_rank=0)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", choices=sorted(CASES))
    ap.add_argument("--uncaught", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    rank = ddl.rank()
    for i, name in enumerate(args.cases):
        last = i == len(args.cases) - 1
        try:
            CASES[name](rank)
        except DDLError as exc:
            if rank == 0:
                print(f"CASE {name}: {type(exc).__name__}: {exc}", flush=True)
            if last and args.uncaught:
                raise
            continue
        if rank == 0:
            print(f"CASE {name}: no error", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
