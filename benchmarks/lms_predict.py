"""What the LMS planner predicts for issue 42's ResNet-152 case: its cost model, not a measurement.

    python3 benchmarks/lms_predict.py [--batch 256] [--cap-gib 16] [--step-ms 246] [--bandwidth-gbps 50 400]

The saved tensors and blocks are ResNet-152's (lms_bench.resnet: torchvision's, fp32, 224x224), recorded by an LMS
session on the CPU at batch 2 and scaled to --batch; each block's forward time is its CPU share (least
of three profiles) of
the forward, scaled so the forward is a third of --step-ms (the issue's uncapped step on an H200:
246 ms at batch 256).  The activation budget is the cap less weights, gradients, momentum and the
session's reserve, as ``Session`` computes it.  For each bandwidth (GB/s host<->device: 50 is PCIe
5, 400 NVLink-C2C) it prints the plan and the predicted images/s ratio against the uncapped step
(issue 42's target: >= 0.70x).  The GPU measurement is ``benchmarks/lms_bench.py --only throughput``.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import os
import sys

import torch

from ddl_runtime.lms import planner
from ddl_runtime.lms.session import Session
from ddl_runtime.lms.transfer import HostStandIn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lms_bench import resnet  # noqa: E402  (torchvision's ResNet, without torchvision)

GIB = 1 << 30


def profile_resnet152(batch: int, repeats: int = 3) -> planner.Profile:
    """ResNet-152's profile at `batch`: recorded at batch 2 on the CPU, bytes scaled linearly; each
    block's forward time the least of `repeats` profiles (the CPU is noisy)."""
    profiles = []
    for _ in range(repeats):
        torch.manual_seed(0)
        model = resnet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        session = Session(model, budget=1 << 50, transfer=HostStandIn(1 << 50), optimizer=opt)
        x, y = torch.randn(2, 3, 224, 224), torch.randint(0, 1000, (2,))
        for _ in range(3):                      # step 1 profiles, step 2 plans (nothing moves)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        profiles.append(session._profile)
        session.remove()
    p = profiles[0]
    scale = batch / 2
    tensors = tuple(dataclasses.replace(t, nbytes=int(t.nbytes * scale)) for t in p.tensors)
    blocks = tuple(dataclasses.replace(b, input_bytes=int(b.input_bytes * scale),
                                       forward_s=min(q.blocks[i].forward_s for q in profiles))
                   for i, b in enumerate(p.blocks))
    return dataclasses.replace(p, tensors=tensors, blocks=blocks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--cap-gib", type=float, default=16.0)
    ap.add_argument("--step-ms", type=float, default=246.0, help="the uncapped step at --batch (issue 42: 246)")
    ap.add_argument("--bandwidth-gbps", type=float, nargs="+", default=[50.0, 400.0])
    args = ap.parse_args()
    if min(args.batch, args.cap_gib, args.step_ms, *args.bandwidth_gbps) <= 0:
        ap.error("--batch, --cap-gib, --step-ms and --bandwidth-gbps must be positive")
    t0 = time.perf_counter()
    p = profile_resnet152(args.batch)
    forward_s = args.step_ms / 3e3
    share = p.forward_s or 1.0
    blocks = tuple(dataclasses.replace(b, forward_s=b.forward_s / share * forward_s) for b in p.blocks)
    params = sum(q.numel() for q in resnet().parameters()) * 4
    fixed = 3 * params                                   # weights, gradients, momentum
    biggest = max(t.nbytes for t in p.tensors)
    reserve = 2 * biggest + max(64 << 20, 2 * biggest)   # Session._reserve after the profile step
    budget = int(args.cap_gib * GIB) - fixed - reserve
    print(f"ResNet-152 batch {args.batch}: {p.saved_bytes / GIB:.1f} GiB saved in {len(p.tensors)} tensors, "
          f"{len(blocks)} blocks; cap {args.cap_gib:g} GiB -> activation budget {budget / GIB:.1f} GiB "
          f"(profiled in {time.perf_counter() - t0:.0f} s on the CPU)")
    for gbps in args.bandwidth_gbps:
        prof = dataclasses.replace(p, blocks=blocks, bandwidth_Bps=gbps * 1e9)
        plan = planner.make_plan(prof, budget)
        ratio = args.step_ms / (args.step_ms + plan.extra_s * 1e3)
        alone = planner.make_plan(dataclasses.replace(prof, blocks=tuple(dataclasses.replace(b, chains=False)
                                                                          for b in prof.blocks)), budget)
        ratio_alone = args.step_ms / (args.step_ms + alone.extra_s * 1e3)
        segs = getattr(plan, "segments", ())
        print(f"PREDICT {gbps:g} GB/s: {plan.describe()}; "
              f"{len(segs) if segs else len(plan.recompute)} recompute units; "
              f"{'fits' if plan.fits else 'OVER BUDGET'}; predicted {ratio:.2f}x of uncapped (target >= 0.70x; "
              f"block by block, segments=False: {ratio_alone:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
