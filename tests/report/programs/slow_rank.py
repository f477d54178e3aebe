"""A small torch training loop on every rank in which one rank is slow, for `wml report`.

    slow_rank.py STEPS OPTIMIZER WHERE SLOW_RANK [BASE_MS SLOW_MS]

OPTIMIZER: ``ddl`` (ddl_runtime.torch.DistributedOptimizer) or ``hvd`` (horovod.torch's).
Every rank sleeps BASE_MS (default 20) before its forward pass, its data loader's time.  WHERE
says where SLOW_RANK spends the rest of its SLOW_MS (default 70): ``loader``, before its forward pass like
a slow data loader (the others then wait for it in the gradient hooks, inside backward), or
``after-backward``, between backward and step() (they wait in step(), or in the next step's
hooks).  Sleeping, not spinning: the slowdown is the same on a loaded machine.  Rank 0 prints a
JSON line of metrics at the end.
"""
import json
import sys
import time

import torch

steps, kind, where, slow_rank = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
base_s = float(sys.argv[5]) / 1e3 if len(sys.argv) > 5 else 0.020
slow_s = float(sys.argv[6]) / 1e3 if len(sys.argv) > 6 else 0.070
if kind == "hvd":
    import ddl_runtime.horovod.torch as hvd

    hvd.init()
    rank = hvd.rank()
    wrap = hvd.DistributedOptimizer
else:
    import ddl_runtime.torch as ddl

    ddl.init()
    rank = ddl.rank()
    wrap = ddl.DistributedOptimizer

torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
opt = wrap(torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters())
x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
loss = None
for step in range(steps):
    time.sleep(base_s + (slow_s - base_s if rank == slow_rank and where == "loader" else 0.0))
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    if rank == slow_rank and where == "after-backward":
        time.sleep(slow_s - base_s)
    opt.step()
if rank == 0:
    print(json.dumps({"loss": round(float(loss.detach()), 4)}), flush=True)
