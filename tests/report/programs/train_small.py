"""A small torch training loop on every rank (ddl_runtime's DistributedOptimizer), for `wml report`.

    train_small.py STEPS [SLOW_RANK FACTOR]

After its backward pass every rank works 50 ms more (a sleep: its own time, the same on a loaded
machine), SLOW_RANK FACTOR times that, so its step's own work is slower by about that factor.
Rank 0 prints a JSON line of metrics at the end (a sweep's trial result).
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
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    # own work beside the model's, larger than the machine's noise: the slowed rank's is what tells it apart
    time.sleep(0.05 * (factor if ddl.rank() == slow_rank else 1.0))
    opt.step()
if ddl.rank() == 0:
    print(json.dumps({"loss": round(float(loss.detach()), 4), "lr": lr}), flush=True)
