"""A small torch training run with Checkpointer, as a chained job would run it (tests only).

    python torch_chain.py OUT --steps 40 --mode optimizer|plain|elastic [--every 5] [--slow-save-from 9]
                          [--wait-for-stop-after N]

optimizer: ddl_runtime.torch's DistributedOptimizer and Checkpointer; plain: a plain loop
(allreduce_n of the gradients) with Checkpointer; elastic: Horovod's DistributedOptimizer and
hvd.elastic.TorchState, whose commit() each step is the chain's step boundary.

Deterministic data order (step k's batch comes from a generator seeded with k), dropout and
per-rank python / numpy / torch random streams, SGD with momentum (optimizer state).  Each rank
writes OUT/pid.rank<r> (its pid and its rankexec's); rank 0 writes OUT/progress (the last step
done) and, at the end, OUT/final.pt (the weights) and OUT/final.sha256, and prints FINAL <sha256 of the weights>.

--wait-for-stop-after N (in a chained job): after the segment's first N steps each rank waits until
the stop signal has reached it (at most 120 s, then exit 3) before the next step, as if that step
took the rest of the walltime; so each segment's stop is agreed at its step N+1 whatever the
machine's speed.  Rank 0 writes OUT/waiting-seg<k> (segment k) when it starts waiting.
"""
import argparse
import hashlib
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

import ddl_runtime
import ddl_runtime.torch as ddl


class SlowToPickle:
    """Stands in for a model so large that writing it takes a while (for the kill-mid-save test)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __reduce__(self):
        time.sleep(self.seconds)
        return (SlowToPickle, (0.0,))


class Extra:
    """An object with state_dict(): what a sampler or scheduler looks like to the Checkpointer."""

    def __init__(self, slow_from):
        self.slow_from, self.step = slow_from, -1

    def state_dict(self):
        slow = self.slow_from is not None and self.step >= self.slow_from
        return {"step": self.step, "pad": b"x" * (1 << 20), "slow": SlowToPickle(60.0 if slow else 0.0)}

    def load_state_dict(self, state):
        self.step = state["step"]


def wait_for_stop(rank: int, out: Path) -> None:
    import ddl_runtime.checkpoint as checkpoint

    if rank == 0:
        (out / f"waiting-seg{os.environ.get('WML_CHAIN_SEGMENT', '0')}").write_text("")
    deadline = time.monotonic() + 120
    while not checkpoint.requested():
        if time.monotonic() > deadline:
            print(f"rank {rank}: no stop signal within 120 s", flush=True)
            raise SystemExit(3)
        time.sleep(0.01)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--mode", choices=("optimizer", "plain", "elastic"), default="optimizer")
    p.add_argument("--every", type=int, default=None)
    p.add_argument("--slow-save-from", type=int, default=None)
    p.add_argument("--step-seconds", type=float, default=0.02)
    p.add_argument("--wait-for-stop-after", type=int, default=None)
    args = p.parse_args()
    out = Path(args.out)
    ddl.init()
    r = ddl.rank()
    (out / f"pid.rank{r}").write_text(f"{os.getpid()} {os.getppid()}\n")

    torch.manual_seed(0)
    x_all = torch.randn(512, 20)
    y_all = (x_all @ torch.randn(20, 4)).argmax(1)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if args.mode == "optimizer":
        opt = ddl.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    elif args.mode == "elastic":
        import ddl_runtime.horovod.torch as hvd
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    ddl.broadcast_parameters(model.state_dict(), root_rank=0)
    random.seed(r)
    np.random.seed(r)
    torch.manual_seed(100 + r)  # per-rank dropout streams: resuming must give each rank its own back

    def train_step(step):
        order = torch.randperm(512, generator=torch.Generator().manual_seed(step))[:32]
        idx = order[r::ddl.size()]
        x = x_all[idx] * (1.0 + 0.01 * random.random()) + torch.from_numpy(np.random.normal(0, 0.01, (16, 20))).float()
        loss = torch.nn.functional.cross_entropy(model(x), y_all[idx])
        opt.zero_grad()
        loss.backward()
        if args.mode == "plain":
            grads = [p_.grad for p_ in model.parameters()]
            ddl_runtime.allreduce_n(grads, op="avg", names=[n for n, _ in model.named_parameters()])
        opt.step()
        if r == 0:
            (out / "progress").write_text(str(step))
        time.sleep(args.step_seconds)

    if args.mode == "elastic":
        state = hvd.elastic.TorchState(model, opt, step=0)

        @hvd.elastic.run
        def train(state):
            while state.step < args.steps:
                train_step(state.step)
                state.step += 1
                state.commit()

        train(state)
    else:
        extra = Extra(args.slow_save_from)
        ckpt = ddl.Checkpointer(model, opt, every=args.every, steps=args.steps, extra=extra)  # the addition, line 1
        first = ckpt.restore()
        for step in range(first, args.steps):                               # ... and 2
            if args.wait_for_stop_after is not None and ckpt.active and step == first + args.wait_for_stop_after:
                wait_for_stop(r, out)
            train_step(step)
            extra.step = step
            ckpt.step_end(step)                                             # ... and 3
    if r == 0:
        weights = torch.cat([v.reshape(-1) for v in model.state_dict().values()])
        torch.save(model.state_dict(), out / "final.pt")
        digest = hashlib.sha256(weights.numpy().tobytes()).hexdigest()
        (out / "final.sha256").write_text(digest)
        print("FINAL", digest, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
