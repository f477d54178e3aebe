"""Training step with gradients in shared memory vs ordinary gradients (one host).

Run on real ranks:  mpiexec -n 2 python benchmarks/torch_shared_gradients.py [--rounds 7] [--calls 3]

A model with ResNet-50's parameter count and tensor shapes flattened into Linear-free
parameters (161 tensors, 25.6 M float32) whose loss is a cheap function of every parameter,
so the step is dominated by what the gradients cost: zero_grad, backward (writes every
gradient), the reduction and an SGD update.  Two DistributedOptimizers, interleaved round by
round (time_interleaved: median per step over rounds):

* ``gradient_as_bucket_view=False`` (default), ``zero_grad()`` (gradients set to None);
* ``gradient_as_bucket_view=True``, ``zero_grad(set_to_none=False)``: the gradients stay in the
  shared heap and are reduced where they lie.

Rank 0 prints both and the ratio; ``--json FILE`` writes the figures.
"""
from __future__ import annotations

import argparse
import statistics

import torch
from _timing import time_interleaved

import ddl_runtime as ddl
import ddl_runtime.torch as dtorch
from ddl_runtime.resnet50 import resnet50_shapes


class Params(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(s) * 0.01) for _, s in resnet50_shapes()])

    def loss(self) -> torch.Tensor:
        return sum((p * p).sum() for p in self.ps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dtorch.init()
    variants = {}
    for label, shared, to_none in (("ordinary gradients", False, True),
                                   ("shared, zero_grad(set_to_none=False)", True, False),
                                   ("shared, zero_grad()", True, True)):
        model = Params()
        opt = dtorch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-3),
                                          named_parameters=model.named_parameters(),
                                          gradient_as_bucket_view=shared)

        def step(model=model, opt=opt, to_none=to_none):
            opt.zero_grad(set_to_none=to_none)
            model.loss().backward()
            opt.step()
        variants[label] = step
    times = time_interleaved(variants, args.rounds, args.calls, ddl.barrier)
    if ddl.rank() == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        base = med["ordinary gradients"]
        print(f"ranks {ddl.size()}, {args.rounds} rounds x {args.calls} steps, median time per training step "
              "(161 tensors, 25.6 M float32)")
        for k, v in med.items():
            print(f"  {k:38s} {v * 1e3:8.1f} ms   x{base / v:.2f} faster than ordinary")
        if args.json:
            import json
            with open(args.json, "w") as fh:
                json.dump({"median_s": med, "all_s": times}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
