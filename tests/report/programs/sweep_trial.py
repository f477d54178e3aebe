"""A sweep's trial for `wml report` (tests only): a few steps of ddl_runtime's DistributedOptimizer,
then rank 0 prints {"loss": LR} (unless --no-metric), then exits 3 when LR equals --fail-at.

    sweep_trial.py --lr LR --bs BS [--no-metric] [--fail-at LR]
"""
import argparse
import json
import sys

import torch

import ddl_runtime.torch as ddl

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--bs", type=int, required=True)
p.add_argument("--no-metric", action="store_true")
p.add_argument("--fail-at", type=float, default=None)
a = p.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
ddl.init()
model = torch.nn.Linear(8, 2)
opt = ddl.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=a.lr), named_parameters=model.named_parameters())
x, y = torch.randn(a.bs, 8), torch.randn(a.bs, 2)
for _ in range(5):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
if ddl.rank() == 0 and not a.no_metric:
    print(json.dumps({"loss": a.lr}), flush=True)
sys.exit(3 if a.fail_at is not None and a.lr == a.fail_at else 0)
