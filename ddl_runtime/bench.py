"""Allreduce benchmark: `mpiexec -n 2 python -m ddl_runtime.bench` (also `wml bench allreduce`).

Two parts, printed by rank 0 as Markdown:
1. an nccl-tests style sweep over message sizes (bytes, count, time, algbw, busbw) for
   ddl_runtime.allreduce and for one mpi4py Allreduce, float32, in place;
2. ResNet-50's 161 gradient tensors (25.6 M float32) reduced by ddl_runtime.allreduce_n, by one
   mpi4py Allreduce per tensor, by one Allreduce of a pre-fused buffer (packing not counted),
   and by torch.distributed gloo all_reduce, per tensor and in 25 MB buckets (when torch is
   installed); in a one-host job also by allreduce_n(mpi=True), the MPI path without shared memory,
   and by allreduce_n of the same gradients allocated with ddl_runtime.shared_zeros (reduced
   where they lie); and out of place by allreduce_n_fresh (results placed by the runtime);
3. the digits CNN's step (examples/train_digits.py: 8 gradients + 1 presence-flag tensor, 153 KB):
   allreduce_n, and the FlatAllreduce that torch's DistributedOptimizer reduces such a bucket
   with (copying in and out counted), against one mpi4py Allreduce of the same bytes.
Methods are interleaved round by round and medians reported, so ratios come from one run on
a shared, noisy machine.  algbw = bytes / time; busbw = algbw * 2(n-1)/n.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

import numpy as np
from mpi4py import MPI

from .collectives import ops as ddl
from .state import runtime as _runtime
from .resnet50 import resnet50_shapes

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_bytes(text: str) -> int:
    text = text.strip().upper().rstrip("B")
    unit = text[-1] if text and text[-1] in UNITS else ""
    return int(float(text[: len(text) - len(unit)]) * UNITS[unit])


def human(n: float) -> str:
    for unit in ("", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:g} {unit}B" if unit else f"{int(n)} B"
        n /= 1024
    return str(n)


def timed(comm: MPI.Comm, fn: Callable[[], None], iters: int) -> float:
    """Mean seconds per call over `iters` calls, started together, slowest rank counts."""
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    elapsed = (time.perf_counter() - start) / iters
    return comm.allreduce(elapsed, op=MPI.MAX)


def sweep(comm: MPI.Comm, sizes: List[int], budget_s: float) -> List[dict]:
    n = comm.Get_size()
    rows = []
    for nbytes in sizes:
        count = max(1, nbytes // 4)
        buf = np.ones(count, np.float32)
        results = {}
        for name, fn in (("ddl", lambda: ddl.allreduce(buf, name="sweep")),
                         ("mpi4py", lambda: comm.Allreduce(MPI.IN_PLACE, buf))):
            fn()  # warm-up (and the plan cache)
            first = timed(comm, fn, 1)
            iters = int(max(3, min(200, budget_s / max(first, 1e-6))))
            iters = comm.bcast(iters, root=0)
            results[name] = min(timed(comm, fn, iters) for _ in range(3))
        row = {"bytes": count * 4, "count": count}
        for name, t in results.items():
            algbw = row["bytes"] / t / 1e9
            row[name] = {"us": t * 1e6, "algbw": algbw, "busbw": algbw * 2 * (n - 1) / n if n > 1 else 0.0}
        rows.append(row)
    return rows


class Gloo:
    """torch.distributed gloo, bootstrapped over MPI (rank 0 opens a TCPStore on a free port)."""

    def __init__(self, comm: MPI.Comm):
        import socket

        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        hosts = comm.allgather(socket.gethostname())
        host = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]
        if comm.Get_rank() == 0:
            store = dist.TCPStore(host, 0, comm.Get_size(), is_master=True, wait_for_workers=False)
            port = store.port
        port = comm.bcast(port if comm.Get_rank() == 0 else None, root=0)
        if comm.Get_rank() != 0:
            store = dist.TCPStore(host, port, comm.Get_size(), is_master=False)
        dist.init_process_group("gloo", store=store, rank=comm.Get_rank(), world_size=comm.Get_size())


def resnet(comm: MPI.Comm, repeats: int, iters: int, with_gloo: bool, fusion_mb: List[float]) -> dict:
    shapes = resnet50_shapes()
    names = [name for name, _ in shapes]
    arrays = [np.full(math.prod(s), 1.0, np.float32).reshape(s) for _, s in shapes]
    fused = np.ones(sum(a.size for a in arrays), np.float32)
    rt = _runtime.current()
    default_bytes = rt.fusion_bytes
    methods: Dict[str, Callable[[], None]] = {}

    def ddl_n(fusion_bytes: int):
        def run():
            rt.fusion_bytes = fusion_bytes
            ddl.allreduce_n(arrays, op="sum", names=names)
        return run

    methods["ddl allreduce_n"] = ddl_n(default_bytes)
    if rt.shm is not None:
        methods["ddl allreduce_n, mpi=True (MPI path, no shared memory)"] = \
            lambda: ddl.allreduce_n(arrays, op="sum", mpi=True, names=names)
    if ddl.algorithm() == "hierarchical":
        methods["ddl allreduce_n, mpi=True (flat baseline)"] = \
            lambda: ddl.allreduce_n(arrays, op="sum", mpi=True, names=names)
    # the same gradients living as views of one flat buffer (DDP's gradient_as_bucket_view):
    # allreduce_n then reduces that buffer in place, in contiguous bucket-sized chunks
    flat_grads = np.ones(fused.size, np.float32)
    methods["ddl allreduce_n, gradients as views of one flat buffer"] = \
        lambda: ddl.allreduce_n([flat_grads], op="sum", names=["flat_grads"])
    if rt.shm is not None:  # the same gradients allocated in the shared heap: reduced where they lie
        heap_grads = [ddl.shared_zeros(a.shape, a.dtype) for a in arrays]
        for h in heap_grads:
            h[...] = 1.0
        methods["ddl allreduce_n, gradients in shared memory (shared_zeros)"] = \
            lambda: ddl.allreduce_n(heap_grads, op="sum", names=names)
    # out of place, results placed by the runtime (what ddl_runtime.tensorflow runs on)
    methods["ddl allreduce_n_fresh (out of place; results in shared memory on one host)"] = \
        lambda: ddl.allreduce_n_fresh(arrays, op="sum", names=names)
    for mb in fusion_mb:
        methods[f"ddl allreduce_n, {mb:g} MB buckets"] = ddl_n(int(mb * (1 << 20)))
    methods["mpi4py Allreduce per tensor"] = lambda: [comm.Allreduce(MPI.IN_PLACE, a) for a in arrays]
    methods["mpi4py Allreduce, one pre-fused buffer"] = lambda: comm.Allreduce(MPI.IN_PLACE, fused)
    if with_gloo:
        gloo = Gloo(comm)
        tensors = [gloo.torch.from_numpy(a.copy()) for a in arrays]
        methods["torch.distributed gloo all_reduce per tensor"] = lambda: [gloo.dist.all_reduce(t) for t in tensors]
        methods["torch.distributed gloo all_reduce, 25 MB buckets (pack + unpack counted)"] = \
            gloo_buckets(gloo, tensors, 25 << 20)
    for fn in methods.values():
        fn()  # warm-up
    samples: Dict[str, List[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            samples[name].append(timed(comm, fn, iters))
    rt.fusion_bytes = default_bytes
    if with_gloo:
        gloo.dist.destroy_process_group()
    medians = {name: statistics.median(ts) for name, ts in samples.items()}
    return {"tensors": len(arrays), "values": int(fused.size), "bytes": int(fused.nbytes),
            "fusion_mb": default_bytes / (1 << 20), "median_s": medians,
            "min_s": {name: min(ts) for name, ts in samples.items()}, "samples_s": samples}


def gloo_buckets(gloo, tensors, bucket_bytes: int) -> Callable[[], None]:
    """DDP's default: tensors packed in list order into buckets of ~25 MB, one all_reduce each."""
    torch = gloo.torch
    buckets: List[list] = [[]]
    size = 0
    for t in tensors:
        if buckets[-1] and size + t.numel() * t.element_size() > bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(t)
        size += t.numel() * t.element_size()
    flats = [torch.empty(sum(t.numel() for t in b), dtype=b[0].dtype) for b in buckets]

    def run():
        for bucket, flat in zip(buckets, flats):
            torch.cat([t.reshape(-1) for t in bucket], out=flat)
            gloo.dist.all_reduce(flat)
            for t, part in zip(bucket, torch.split(flat, [t.numel() for t in bucket])):
                t.copy_(part.view_as(t))
    return run


DIGITS_SHAPES = [("conv1.weight", (16, 1, 3, 3)), ("conv1.bias", (16,)), ("conv2.weight", (32, 16, 3, 3)),
                 ("conv2.bias", (32,)), ("fc1.weight", (64, 512)), ("fc1.bias", (64,)),
                 ("fc2.weight", (10, 64)), ("fc2.bias", (10,)), ("grad-flags", (8,))]


def digits(comm: MPI.Comm, repeats: int, iters: int) -> dict:
    """The digits CNN's per-step reduction: allreduce_n of its 9 tensors vs one bare Allreduce."""
    names = [n for n, _ in DIGITS_SHAPES]
    arrays = [np.ones(s, np.float32) for _, s in DIGITS_SHAPES]
    fused = np.ones(sum(a.size for a in arrays), np.float32)
    from .collectives.flat_allreduce import FlatAllreduce

    flat = FlatAllreduce(fused.size, np.float32, "digits-bucket", op="avg")
    pieces = [a.reshape(-1) for a in arrays]
    bounds = np.cumsum([0] + [p.size for p in pieces]).tolist()

    def flat_step() -> None:  # what DistributedOptimizer does per step: copy in, reduce, copy out
        np.concatenate(pieces, out=flat.buffer())
        out = flat.start().wait()
        for p, lo, hi in zip(pieces, bounds, bounds[1:]):
            np.copyto(p, out[lo:hi])

    methods: Dict[str, Callable[[], None]] = {
        "ddl allreduce_n (op avg)": lambda: ddl.allreduce_n(arrays, op="avg", names=names),
        "ddl FlatAllreduce, copied in and out (DistributedOptimizer's path)": flat_step,
        "ddl allreduce_n, mpi=True": lambda: ddl.allreduce_n(arrays, op="avg", mpi=True, names=names),
        "mpi4py Allreduce of the same bytes (one buffer)": lambda: comm.Allreduce(MPI.IN_PLACE, fused),
    }
    for fn in methods.values():
        fn()
    samples: Dict[str, List[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            samples[name].append(timed(comm, fn, iters))
    return {"tensors": len(arrays), "bytes": int(fused.nbytes),
            "median_s": {k: statistics.median(v) for k, v in samples.items()},
            "min_s": {k: min(v) for k, v in samples.items()}}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if models:
            cpu = f"{models[0]} x {len(models)} logical CPUs"
    except OSError:
        pass
    return f"{platform.system()} {platform.release()}, {cpu}, Python {platform.python_version()}, " \
           f"{MPI.Get_library_version().splitlines()[0].strip()}, mpi4py {__import__('mpi4py').__version__}"


def markdown(report: dict) -> str:
    out = [f"Machine: {report['machine']}  ", f"Ranks: {report['ranks']} ({report['algorithm']} algorithm)  ",
           f"Command: `{report['command']}`", ""]
    if report.get("sweep"):
        out += ["| bytes | count | ddl time (us) | ddl algbw (GB/s) | ddl busbw (GB/s) | mpi4py time (us) | mpi4py busbw (GB/s) |",
                "|---:|---:|---:|---:|---:|---:|---:|"]
        for row in report["sweep"]:
            d, m = row["ddl"], row["mpi4py"]
            out.append(f"| {row['bytes']} | {row['count']} | {d['us']:.1f} | {d['algbw']:.3f} | {d['busbw']:.3f} "
                       f"| {m['us']:.1f} | {m['busbw']:.3f} |")
        out.append("")
    if report.get("resnet"):
        r = report["resnet"]
        base = r["median_s"]["ddl allreduce_n"]
        out += [f"ResNet-50 gradients: {r['tensors']} tensors, {r['values']:,} float32 ({human(r['bytes'])}); "
                f"default buckets {r['fusion_mb']:g} MB; median of {len(next(iter(r['samples_s'].values())))} rounds",
                "", "| method | median (ms) | best (ms) | time / allreduce_n |", "|---|---:|---:|---:|"]
        for name, t in r["median_s"].items():
            out.append(f"| {name} | {t * 1e3:.2f} | {r['min_s'][name] * 1e3:.2f} | {t / base:.2f}x |")
        out.append("")
    if report.get("digits"):
        d = report["digits"]
        base = d["median_s"]["mpi4py Allreduce of the same bytes (one buffer)"]
        out += [f"Digits CNN step: {d['tensors']} tensors, {human(d['bytes'])}", "",
                "| method | median (us) | best (us) | time / one mpi4py Allreduce |", "|---|---:|---:|---:|"]
        for name, t in d["median_s"].items():
            out.append(f"| {name} | {t * 1e6:.1f} | {d['min_s'][name] * 1e6:.1f} | {t / base:.2f}x |")
        out.append("")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddl_runtime.bench", description=__doc__.splitlines()[0])
    parser.add_argument("-b", "--min-bytes", default="4", help="smallest message (default 4)")
    parser.add_argument("-e", "--max-bytes", default="256M", help="largest message (default 256M)")
    parser.add_argument("-f", "--factor", type=int, default=4, help="size multiplier between rows (default 4)")
    parser.add_argument("--budget", type=float, default=0.2, help="seconds per size and method (default 0.2)")
    parser.add_argument("--repeats", type=int, default=7, help="ResNet-50 rounds (default 7)")
    parser.add_argument("--iters", type=int, default=5, help="ResNet-50 calls per round (default 5)")
    parser.add_argument("--fusion-mb", default="", help="also time allreduce_n with these bucket sizes, e.g. 1,2,4,8,16")
    parser.add_argument("--no-sweep", action="store_true", help="skip the message-size sweep")
    parser.add_argument("--no-resnet", action="store_true", help="skip the ResNet-50 gradient set")
    parser.add_argument("--no-gloo", action="store_true", help="skip torch.distributed gloo")
    parser.add_argument("--no-digits", action="store_true", help="skip the digits CNN step")
    parser.add_argument("--digits-iters", type=int, default=200, help="digits calls per round (default 200)")
    parser.add_argument("--json", help="also write the raw results here (rank 0)")
    args = parser.parse_args(argv)
    if args.factor < 2:
        parser.error("--factor must be at least 2")
    ddl.init()
    comm = MPI.COMM_WORLD
    sizes, nbytes = [], max(4, parse_bytes(args.min_bytes))
    while nbytes <= parse_bytes(args.max_bytes):
        sizes.append(nbytes)
        nbytes *= args.factor
    with_gloo = not args.no_gloo
    if with_gloo:
        try:
            import torch.distributed  # noqa: F401
        except ImportError:
            with_gloo = False
    report = {"machine": machine(), "ranks": comm.Get_size(), "algorithm": ddl.algorithm(),
              "command": f"mpiexec -n {comm.Get_size()} python -m ddl_runtime.bench " + " ".join(argv if argv is not None else sys.argv[1:])}
    if not args.no_sweep:
        report["sweep"] = sweep(comm, sizes, args.budget)
    if not args.no_resnet:
        fusion = [float(x) for x in args.fusion_mb.split(",") if x.strip()]
        report["resnet"] = resnet(comm, args.repeats, args.iters, with_gloo, fusion)
    if not args.no_digits:
        report["digits"] = digits(comm, args.repeats, args.digits_iters)
    if comm.Get_rank() == 0:
        sys.stdout.write(markdown(report) + "\n")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
    ddl.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
