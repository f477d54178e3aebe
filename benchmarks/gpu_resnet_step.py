"""One training step of ResNet-50 at one rank: bare SGD against ddl_runtime.torch's and
horovod.torch's DistributedOptimizer (issue 30: within 2 % of bare SGD).

    ddlrun -n 1 python benchmarks/gpu_resnet_step.py              # on a GPU machine (torchvision's resnet50)
    ddlrun -n 1 python benchmarks/gpu_resnet_step.py --model tiny  # the same code on CPU, a small CNN

Each method has its own copy of the model (same initial weights) and an SGD optimizer; a step is
zero_grad, forward, cross-entropy, backward, optimizer.step, then a device synchronize.  Methods
are interleaved round by round (benchmarks/_timing.py); the figure is the median ms per step and
the ratio to bare SGD, printed by rank 0 as one RESULT line.
"""
import argparse
import copy
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _checks import CPU_LIMIT, check  # noqa: E402
from _timing import time_interleaved  # noqa: E402

import ddl_runtime.torch as ddl_torch  # noqa: E402
import horovod.torch as hvd  # noqa: E402  (ddlrun --horovod, or the shim on PYTHONPATH)


LIMIT = 1.02  # issue 30: within 2 % of bare SGD


def tiny() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 1000))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["resnet50", "tiny"], default="resnet50")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10, help="steps per round and method")
    ap.add_argument("--cpu", action="store_true", help="the smoke run of gpu_checks.sh --cpu: --model tiny, no limit")
    args = ap.parse_args()
    if args.cpu:
        args.model, args.rounds, args.steps = "tiny", 3, 3
    hvd.init()
    dev = torch.device("cuda", hvd.local_rank()) if torch.cuda.is_available() else torch.device("cpu")
    if args.model == "resnet50":
        import torchvision
        base = torchvision.models.resnet50()
    else:
        base = tiny()
    base = base.to(dev)
    size = 224 if args.model == "resnet50" else 32
    x = torch.randn(args.batch, 3, size, size, device=dev)
    y = torch.randint(0, 1000, (args.batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def stepper(wrap):
        model = copy.deepcopy(base)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        opt = wrap(opt, model)

        def step():
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
        return step

    methods = {
        "bare SGD": stepper(lambda opt, model: opt),
        "ddl_runtime.torch.DistributedOptimizer": stepper(
            lambda opt, model: ddl_torch.DistributedOptimizer(opt, named_parameters=model.named_parameters())),
        "horovod.torch.DistributedOptimizer": stepper(
            lambda opt, model: hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())),
    }
    times = time_interleaved(methods, args.rounds, args.steps, lambda: hvd.allreduce(torch.zeros(1), name="b"))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    if hvd.rank() == 0:
        name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        print("RESULT " + json.dumps({"model": args.model, "device": name, "size": hvd.size(), "batch": args.batch,
                                      "ms_per_step": {k: round(v, 3) for k, v in med.items()},
                                      "ratio_to_bare": {k: round(v / med["bare SGD"], 4) for k, v in med.items()}}),
              flush=True)
        for label in ("ddl_runtime.torch.DistributedOptimizer", "horovod.torch.DistributedOptimizer"):
            ratio = med[label] / med["bare SGD"]
            check(f"{args.model} step 1 rank, {label.split('.')[0]}" + (" (cpu)" if args.cpu else ""),
                  f"{ratio:.3f}x of bare SGD ({med[label]:.1f} ms)", CPU_LIMIT if args.cpu else f"<= {LIMIT}x",
                  args.cpu or ratio <= LIMIT)
    hvd.shutdown()


if __name__ == "__main__":
    main()
