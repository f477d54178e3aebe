"""Ranks sharing one GPU train at the speed of one rank with their whole batch (issue 38).

    mpiexec -n 1 python3 benchmarks/gpu_train_ratio.py alone --baseline B.json    # bare SGD, batch 128
    mpiexec -n 2 -genv CUDA_VISIBLE_DEVICES 0 python3 benchmarks/gpu_train_ratio.py shared --baseline B.json
    ddlrun -n 2 --ranks-per-gpu 2 --gpu-sharing mps --no-prefix -- python3 benchmarks/gpu_train_ratio.py shared ...

`alone`: one rank, ResNet-50 (torchvision), batch 2 x 64, plain SGD: ms per step, written to the
baseline file.  `shared`: N ranks on the one GPU, batch 64 each (the same images per step),
ddl_runtime.torch's and then horovod.torch's DistributedOptimizer: ms per step (the slowest rank's;
each a block of steps after a barrier, timed to a device synchronize) against the baseline; limit
1.15x (`--limit`: gpu_checks.sh gives the host transport's run, `DDL_GPU_TRANSPORT=host`, its own).
On the GPU each line names how the ranks share it: under CUDA MPS (ddlrun --gpu-sharing mps started
the daemon; _checks.gpu_sharing asks it for its server) or time-sliced; a run that asked for MPS and
got none fails its lines.  `--cpu`: a small CNN on CPU tensors (a smoke run; no limit applies).  Rank 0 prints CHECK
lines (benchmarks/_checks.py) and one RESULT line.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _checks import CPU_LIMIT, check, gpu_sharing  # noqa: E402

import ddl_runtime as ddl  # noqa: E402

LIMIT = 1.15


def model(cpu: bool) -> torch.nn.Module:
    if cpu:
        return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 1000))
    import torchvision
    return torchvision.models.resnet50()


def ms_per_step(step, dev, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    ddl.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return (time.perf_counter() - start) * 1e3 / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["alone", "shared"])
    ap.add_argument("--baseline", required=True, help="JSON file: written by 'alone', read by 'shared'")
    ap.add_argument("--batch", type=int, default=64, help="images per rank and step ('alone': N x this)")
    ap.add_argument("--ranks", type=int, default=2, help="'alone': the shared run's rank count")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--limit", type=float, default=LIMIT, help="the most step time may be, x the baseline's")
    ap.add_argument("--cpu", action="store_true")
    args = ap.parse_args()
    ddl.init()
    cpu = args.cpu
    if cpu:
        dev, size, args.batch, args.steps = torch.device("cpu"), 32, 8, 5
    else:
        dev, size = torch.device("cuda", ddl.local_gpuid() or 0), 224
        torch.cuda.set_device(dev)
    torch.manual_seed(0)
    base = model(cpu).to(dev)
    batch = args.batch * (args.ranks if args.mode == "alone" else 1)
    x = torch.randn(batch, 3, size, size, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def stepper(wrap):
        net = model(cpu).to(dev)
        net.load_state_dict(base.state_dict())
        opt = wrap(torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9), net)

        def step():
            opt.zero_grad()
            loss_fn(net(x), y).backward()
            opt.step()
        return step

    result = {"mode": args.mode, "size": ddl.size(), "batch_per_rank": batch,
              "device": "cpu" if cpu else torch.cuda.get_device_name(dev)}
    if args.mode == "alone":
        ms = ms_per_step(stepper(lambda opt, net: opt), dev, 3, args.steps)
        result["ms_per_step"] = round(ms, 3)
        if ddl.rank() == 0:
            with open(args.baseline, "w") as fh:
                json.dump(result, fh)
            check(f"resnet 1x{batch} alone, bare SGD" + (" (cpu)" if cpu else ""), f"{ms:.1f} ms/step",
                  "baseline", True)
    else:
        import ddl_runtime.horovod.torch as hvd
        import ddl_runtime.torch as ddl_torch
        hvd.init()
        with open(args.baseline) as fh:
            alone = json.load(fh)
        methods = {
            "ddl DistributedOptimizer": lambda opt, net: ddl_torch.DistributedOptimizer(
                opt, named_parameters=net.named_parameters()),
            "hvd DistributedOptimizer": lambda opt, net: hvd.DistributedOptimizer(
                opt, named_parameters=net.named_parameters()),
        }
        transport = ddl_runtime_transport()
        for label, wrap in methods.items():
            ms = max(ddl.allgather(torch.tensor([ms_per_step(stepper(wrap), dev, 3, args.steps)],
                                                dtype=torch.float64)).tolist())
            ratio = ms / alone["ms_per_step"]
            result[label] = {"ms_per_step": round(ms, 3), "ratio": round(ratio, 3)}
            # on the GPU: under CUDA MPS or time-sliced, as the MPS control daemon says (issue 57)
            sharing, honest = gpu_sharing() if not cpu else (None, True)
            where = ", ".join(w for w in (transport, sharing) if w)
            result[label]["sharing"] = sharing
            if ddl.rank() == 0:
                check(f"resnet {ddl.size()}x{args.batch} sharing, {label.split()[0]}" + (f" ({where})" if where else ""),
                      f"{ratio:.2f}x of 1 x {alone['batch_per_rank']} ({ms:.1f} ms)",
                      CPU_LIMIT if cpu else f"<= {args.limit}x", cpu or (ratio <= args.limit and honest))
    if ddl.rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)
    ddl.finalize()


def ddl_runtime_transport():
    from ddl_runtime.state import runtime
    gpu = runtime.current().gpu
    return gpu.transport.name if gpu is not None and gpu.transport is not None else None


if __name__ == "__main__":
    main()
