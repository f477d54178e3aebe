"""A 2-rank torch trial of a sweep: its parameters from argv (``--lr {lr} --bs {bs}``) and the
environment (WML_TRIAL, WML_PARAM_*); the ranks agree through a gloo allreduce; rank 0 prints
its metrics as its last JSON line.  ``--fail-if FILE``: exit 3 while FILE exists (a trial made
to fail, then resumed once FILE is gone).  ``--sleep S``: hold the trial S seconds."""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--bs", type=int, required=True)
p.add_argument("--fail-if")
p.add_argument("--sleep", type=float, default=0.0)
a = p.parse_args()
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([a.lr * a.bs * (rank + 1)])
dist.all_reduce(t)
time.sleep(a.sleep)
dist.destroy_process_group()
if a.fail_if and os.path.exists(a.fail_if):
    print(f"trial {os.environ['WML_TRIAL']}: told to fail ({a.fail_if} exists)", flush=True)
    sys.exit(3)
if rank == 0:
    print(json.dumps({"loss": round(t.item(), 6), "world": world, "trial": int(os.environ["WML_TRIAL"]),
                      "env_lr": os.environ["WML_PARAM_LR"], "env_bs": os.environ["WML_PARAM_BS"]}), flush=True)
