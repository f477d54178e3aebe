"""A small torch training loop on every rank (ddl_runtime's DistributedOptimizer), for `wml report`.

    train_small.py STEPS [SLOW_RANK FACTOR]

SLOW_RANK's forward and backward take FACTOR times as long as the others' (a busy loop of the
same length as its measured compute, so the slowdown is real time on that rank).  Rank 0
prints a JSON line of metrics at the end (a sweep's trial result).
"""
import json
import sys
import time

import torch

import ddl_runtime.torch as ddl

steps = int(sys.argv[1])
slow_rank = int(sys.argv[2]) if len(sys.argv) > 2 else -1
factor = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
lr = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05

torch.manual_seed(0)
torch.set_num_threads(1)
ddl.init()
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = ddl.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr), named_parameters=model.named_parameters())
x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
loss = None
for step in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    # a floor under every rank's compute, so the slowed rank's extra time is what tells it apart
    while time.perf_counter() - t0 < 0.01:
        pass
    if ddl.rank() == slow_rank:
        spent = time.perf_counter() - t0
        end = time.perf_counter() + spent * (factor - 1.0)
        while time.perf_counter() < end:
            pass
    opt.step()
if ddl.rank() == 0:
    print(json.dumps({"loss": round(float(loss.detach()), 4), "lr": lr}), flush=True)
