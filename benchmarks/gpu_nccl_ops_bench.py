"""horovod.torch's collectives of CUDA tensors: the device route (NCCL) against the host staging.

Each rank owning its GPU (the NCCL transport) is what the device route needs, so across ranks this
takes a machine with two GPUs or more (NCCL refuses two ranks on one GPU):

    mpiexec -n 2 -genv CUDA_VISIBLE_DEVICES 0,1 python3 benchmarks/gpu_nccl_ops_bench.py   # rank r on GPU r
    mpiexec -n 2 -genv CUDA_VISIBLE_DEVICES 0 python3 benchmarks/gpu_nccl_ops_bench.py --staged-only
                                                                          # 1 GPU shared: host staging only
    mpiexec -n 2 python3 benchmarks/gpu_nccl_ops_bench.py --cpu --mb 1     # CPU smoke run through gloo

In one process, interleaved per round, every op is timed through the device route and through
the host staging (horovod/torch/device_route.DEVICES emptied: pinned D2H, the CPU engine, H2D):
hvd.broadcast_parameters of 160 tensors (100 MB, what every Horovod script starts with), and
allgather (first dims differ), alltoall, reducescatter and allreduce of --mb MB float32 per rank.
Medians of --repeat, synchronized on the device.  Rank 0 prints a table and one `RESULT {json}`
line.  `--cpu` runs CPU tensors through a gloo group with the route let take them: it only shows
that the script runs; its times are no GPU figure.
"""
import argparse
import json
import statistics
import time

import torch

import ddl_runtime.horovod.torch as hvd
from ddl_runtime.state import runtime as _rt
try:
    from ddl_runtime.horovod.torch import device_route
except ImportError:  # main before issue 41 (the pageable baseline, --staged-only): no device route
    device_route = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=64.0, help="MB per rank for allgather/alltoall/reducescatter")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--cpu", action="store_true", help="smoke run on CPU tensors through gloo")
    ap.add_argument("--staged-only", action="store_true", help="time the host staging only (ranks share a GPU)")
    args = ap.parse_args()
    hvd.init()
    rt = _rt.current()
    R, N = hvd.rank(), hvd.size()
    if device_route is None and not args.staged_only:
        ap.error("this tree has no device route (ddl_runtime/horovod/torch/device_route.py): use --staged-only")
    if args.cpu:
        from ddl_runtime.transports.gpu import nccl
        from ddl_runtime.transports.gpu.transport import Transport, state
        nccl.process_group(rt, backend="gloo")
        state(rt).transport = Transport("nccl", "--cpu smoke run")
        dev = torch.device("cpu")
        kind = "cpu"
    else:
        dev = torch.device("cuda", rt.local_gpuid or 0)
        torch.cuda.set_device(dev)
        kind = "cuda"
    n = int(args.mb * 2**20 / 4)
    params = {f"p{i}": torch.full((160 * 1024,), float(R), device=dev) for i in range(160)}
    x = torch.full((n,), float(R), device=dev)
    rows = n // 64 // N * N
    ag = torch.full(((rows // N) + R, 64), float(R), device=dev)  # first dims differ
    a2a = torch.full((rows, 64), float(R), device=dev)
    rs = torch.full((rows, 64), float(R), device=dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    ops = {
        "broadcast_parameters 160 x 640 KB": lambda: hvd.broadcast_parameters(params, root_rank=0),
        f"allgather {args.mb:g} MB": lambda: hvd.allgather(ag),
        f"alltoall {args.mb:g} MB": lambda: hvd.alltoall(a2a),
        f"reducescatter {args.mb:g} MB": lambda: hvd.reducescatter(rs, op=hvd.Sum),
        f"allreduce {args.mb:g} MB": lambda: hvd.allreduce(x, op=hvd.Sum),
    }
    routes = ["staged"] if args.staged_only else ["device", "staged"]
    times = {(op, route): [] for op in ops for route in routes}
    for _ in range(args.repeat + 1):  # the first round warms up (process group, pool, NCCL channels)
        for op, fn in ops.items():
            for route in routes:
                if device_route is None:
                    pass
                elif route == "device":
                    device_route.DEVICES.add(kind)
                else:
                    device_route.DEVICES.discard(kind)
                hvd.barrier()
                sync()
                t0 = time.perf_counter()
                fn()
                sync()
                times[(op, route)].append((time.perf_counter() - t0) * 1e3)
    if device_route is not None:
        device_route.DEVICES.add("cuda")
    rows_out = []
    for op in ops:
        row = {"op": op}
        for route in routes:
            row[f"{route}_ms"] = round(statistics.median(times[(op, route)][1:]), 3)
        if len(routes) == 2:
            row["staged_over_device"] = round(row["staged_ms"] / max(row["device_ms"], 1e-9), 2)
        rows_out.append(row)
    report = rt.control.gather(rows_out, root=0)
    if R == 0:
        device = "cpu (smoke run)" if args.cpu else torch.cuda.get_device_name(dev)
        print(f"{N} ranks, {device}, torch {torch.__version__}, medians of {args.repeat} (ms, rank 0)")
        print("| op | " + " | ".join(f"{r} ms" for r in routes) + (" | staged / device |" if len(routes) == 2 else " |"))
        for row in report[0]:
            cells = [str(row[f"{r}_ms"]) for r in routes] + ([str(row["staged_over_device"])] if len(routes) == 2 else [])
            print(f"| {row['op']} | " + " | ".join(cells) + " |")
        print("RESULT " + json.dumps({"size": N, "device": device, "torch": torch.__version__, "ranks": report}),
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
