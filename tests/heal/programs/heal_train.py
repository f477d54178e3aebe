"""A small torch training run with ddl_runtime.torch's DistributedOptimizer and Checkpointer(every=N),
and a fault on cue, for the self-healing tests (tests only).

    python heal_train.py OUT --steps 24 --every 4 [--kill-at S --node K] [--hang-at S --node K]
                             [--raise-at S --rank R] [--step-seconds 0.05] [--horovod]

--kill-at S: in the first attempt ($WML_ATTEMPT 1), every rank of layout node K SIGKILLs itself as
step S begins (a node lost).  --hang-at S: in the first attempt, every rank of node K sleeps for ever
as step S begins, outside any collective (a data loader stuck on a file system).  --raise-at S: rank
R raises ValueError at step S in every attempt (a bug).  --horovod: Horovod's torch API
(``import horovod.torch as hvd``, run with ddlrun --horovod) with the runtime's Checkpointer.

Deterministic data order (step k's batch from a generator seeded with k), dropout and per-rank
random streams, SGD with momentum.  Rank 0 writes OUT/progress (the last step done) and prints
FINAL <sha256 of the weights> at the end.  Each rank writes OUT/attempt<a>.rank<r> (its node, GROUP_RANK).
"""
import argparse
import hashlib
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import torch


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=24)
    p.add_argument("--every", type=int, default=4)
    p.add_argument("--kill-at", type=int)
    p.add_argument("--hang-at", type=int)
    p.add_argument("--raise-at", type=int)
    p.add_argument("--node", type=int, default=1)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--horovod", action="store_true")
    args = p.parse_args()
    out = Path(args.out)
    attempt = int(os.environ.get("WML_ATTEMPT", "1"))
    node = int(os.environ.get("GROUP_RANK", "0"))
    if args.horovod:
        import horovod.torch as hvd

        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    else:
        import ddl_runtime.torch as hvd

        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    from ddl_runtime.torch import Checkpointer

    (out / f"attempt{attempt}.rank{rank}").write_text(f"{node}\n")

    torch.manual_seed(0)
    x_all = torch.randn(512, 20)
    y_all = (x_all @ torch.randn(20, 4)).argmax(1)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    random.seed(rank)
    np.random.seed(rank)
    torch.manual_seed(100 + rank)

    ckpt = Checkpointer(model, opt, every=args.every, steps=args.steps)
    for step in range(ckpt.restore(), args.steps):
        if step == args.kill_at and attempt == 1 and node == args.node:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == args.hang_at and attempt == 1 and node == args.node:
            while True:
                time.sleep(3600)         # outside any collective: no step ends any more
        if step == args.raise_at and rank == args.rank:
            raise ValueError(f"bad batch at step {step}")
        order = torch.randperm(512, generator=torch.Generator().manual_seed(step))[:32]
        idx = order[rank::size]
        x = x_all[idx] * (1.0 + 0.01 * random.random()) + torch.from_numpy(
            np.random.normal(0, 0.01, (len(idx), 20))).float()
        loss = torch.nn.functional.cross_entropy(model(x), y_all[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            (out / "progress").write_text(str(step))
        time.sleep(args.step_seconds)
        ckpt.step_end(step)
    if rank == 0:
        weights = torch.cat([v.reshape(-1) for v in model.state_dict().values()])
        print("FINAL", hashlib.sha256(weights.numpy().tobytes()).hexdigest(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
