"""horovod.torch's device route (NCCL transport) on CPU through a gloo group, against the host path.

The job's transport is set to NCCL and mpi_ops' device route is let take CPU tensors
(device_route.DEVICES), so CPU tensors run the code CUDA tensors run on the NCCL transport:
negotiated by name, then moved or reduced where they lie through the runtime's process group
(collectives/negotiated_device.py -> transports/gpu/nccl_ops.py, nccl.py), here a gloo group bootstrapped the way the
runtime bootstraps NCCL.  Every call is made twice, through the device route and through the host
path (the route off: the CPU engine over MPI), and the two results compared, in the dtypes
Horovod's test_torch.py uses (and bfloat16, bool for the moves): allgather (first dims differ,
0-d, grouped, async, gradient), broadcast (out of place, in place, non-contiguous in place),
alltoall (splits, even, async, gradient), reducescatter (sum, average, scaled, uneven rows,
grouped), allreduce, on the global set and on a process set of some ranks, with a joined rank;
and the core API's bcast and allgather of device tensors (ddl_runtime.transports.gpu) through the group.
Calls counted in nccl_ops / nccl show which route ran.

`pinned` as the argument runs the host staging instead (a CPU stand-in of the pinned pool):
allgather's and alltoall's outputs are pool memory.  Rank 0 prints one SUMMARY line.
"""
import json
import sys
from collections import Counter

import numpy as np
import torch
from mpi4py import MPI

import ddl_runtime.horovod.torch as hvd
from ddl_runtime.state import runtime as _rt
from ddl_runtime.transports import gpu
from ddl_runtime.engine.buffers import TensorRef
from ddl_runtime.transports.gpu import host, nccl, nccl_ops
from ddl_runtime.transports.gpu.transport import Transport, state
from ddl_runtime.horovod.torch import device_route, mpi_ops

hvd.init()
R, N = hvd.rank(), hvd.size()
rt = _rt.current()
nccl.process_group(rt, backend="gloo")
state(rt).transport = Transport("nccl", "set by the test: every rank owns its GPU")
failures = []
calls = Counter()


def counted(module, fname):
    real = getattr(module, fname)

    def wrapper(*args, **kwargs):
        calls[fname] += 1
        return real(*args, **kwargs)
    setattr(module, fname, wrapper)


for fname in ("allgather_start", "broadcast_start", "alltoall_start", "reducescatter_start"):
    counted(nccl_ops, fname)
counted(nccl, "allreduce_start")

MOVE = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64,
        torch.bfloat16, torch.bool]
REDUCE = [torch.int32, torch.int64, torch.float16, torch.float32, torch.float64]  # test_torch.py's, as on GPU


def value(rank, shape, dtype, shift=0):
    n = 1
    for d in shape:
        n *= d
    t = (torch.arange(n, dtype=torch.float64) % 7 + rank * 3 + shift).reshape(shape)
    return (t.remainder(2) if dtype == torch.bool else t).to(dtype)


def same(label, dev, ref, close=False):
    if isinstance(dev, (list, tuple)):
        if len(dev) != len(ref):
            failures.append(f"{label}: {len(dev)} results, host path {len(ref)}")
            return
        for i, (d, r) in enumerate(zip(dev, ref)):
            same(f"{label}[{i}]", d, r, close)
        return
    ok = dev.dtype == ref.dtype and dev.shape == ref.shape and dev.device == ref.device
    if ok:
        ok = torch.allclose(dev.double(), ref.double(), rtol=2e-3, atol=1e-6) if close else torch.equal(dev, ref)
    if not ok:
        failures.append(f"{label}: device route {dev.flatten()[:6].tolist()} {dev.dtype} {tuple(dev.shape)}, "
                        f"host path {ref.flatten()[:6].tolist()} {ref.dtype} {tuple(ref.shape)}")


def both(label, fn, kinds, close=False):
    """fn(tag) through the device route, then through the host path; the results equal, and the
    device route's nccl_ops calls made (`kinds`) by the first only."""
    device_route.DEVICES.add("cpu")
    before = calls.copy()
    dev = fn(f"{label}.dev")
    ran = calls - before
    device_route.DEVICES.discard("cpu")
    before = calls.copy()
    ref = fn(f"{label}.host")
    if calls - before:
        failures.append(f"{label}: the host path called the device route's {dict(calls - before)}")
    if any(not ran[k] for k in kinds):
        failures.append(f"{label}: the device route did not run {kinds} (ran {dict(ran)})")
    same(label, dev, ref, close)
    return dev


def device_route_checks():
    # -- the global set, every dtype ---------------------------------------------------------------------
    for dtype in MOVE:
        d = str(dtype).replace("torch.", "")
        both(f"allgather {d}", lambda tag: hvd.allgather(value(R, (R + 1, 3), dtype), name=tag), ["allgather_start"])
        both(f"allgather 3-d {d}", lambda tag: hvd.allgather(value(R, (2, 2, 3), dtype), name=tag), ["allgather_start"])
        both(f"allgather 0-d {d}", lambda tag: hvd.allgather(value(R, (), dtype), name=tag), ["allgather_start"])
        both(f"grouped_allgather {d}", lambda tag: hvd.grouped_allgather(
            [value(R, (R + 1, 2), dtype), value(R, (1, 4), dtype, 1), value(R, (0, 5), dtype)], name=tag),
            ["allgather_start"])
        root = N - 1
        both(f"broadcast {d}", lambda tag: hvd.broadcast(value(R, (3, 2), dtype), root_rank=root, name=tag),
             ["broadcast_start"])

        def inplace(tag, dtype=dtype):
            t = value(R, (4,), dtype)
            out = hvd.broadcast_(t, root_rank=0, name=tag)
            if out is not t:
                failures.append(f"{tag}: broadcast_ returned a new tensor")
            return t
        both(f"broadcast_ {d}", inplace, ["broadcast_start"])
        splits = [k + 1 for k in range(N)]
        both(f"alltoall splits {d}", lambda tag: hvd.alltoall(value(R, (sum(splits), 2), dtype),
                                                              splits=torch.tensor(splits, dtype=torch.int32), name=tag),
             ["alltoall_start"])
        both(f"alltoall even {d}", lambda tag: hvd.alltoall(value(R, (2 * N,), dtype), name=tag), ["alltoall_start"])
    for dtype in REDUCE:
        d = str(dtype).replace("torch.", "")
        rows = 2 * N + 1  # uneven: the first rank gets one more
        both(f"reducescatter sum {d}", lambda tag: hvd.reducescatter(value(R, (rows, 2), dtype), op=hvd.Sum, name=tag),
             ["reducescatter_start"])
        both(f"reducescatter even 3-d {d}", lambda tag: hvd.reducescatter(value(R, (2 * N, 2, 2), dtype), op=hvd.Sum,
                                                                          name=tag), ["reducescatter_start"])
        both(f"grouped_reducescatter {d}", lambda tag: hvd.grouped_reducescatter(
            [value(R, (N, 3), dtype), value(R, (rows,), dtype, 2)], op=hvd.Sum, name=tag), ["reducescatter_start"])
        both(f"allreduce {d}", lambda tag: hvd.allreduce(value(R, (5, 2), dtype), op=hvd.Sum, name=tag),
             ["allreduce_start"])
        if dtype.is_floating_point:
            both(f"reducescatter average {d}", lambda tag: hvd.reducescatter(value(R, (rows, 2), dtype), name=tag),
                 ["reducescatter_start"], close=True)
            both(f"reducescatter scaled {d}", lambda tag: hvd.reducescatter(
                value(R, (N, 2), dtype), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5, name=tag),
                ["reducescatter_start"])

    both("grouped_allgather mixed dtypes", lambda tag: hvd.grouped_allgather(
        [value(R, (R + 1, 3), torch.int8), value(R, (2,), torch.float64), value(R, (1, 1), torch.int16)], name=tag),
        ["allgather_start"])

    # -- async, submitted in opposite orders on odd and even ranks: the negotiated order runs them ---------
    def in_flight(tag):
        starts = [
            lambda: hvd.allgather_async(value(R, (R + 2, 2), torch.float32), name=f"{tag}.ag"),
            lambda: hvd.broadcast_async(value(R, (3,), torch.int64), root_rank=N - 1, name=f"{tag}.bc"),
            lambda: hvd.alltoall_async(value(R, (N, 2), torch.float16), name=f"{tag}.aa"),
            lambda: hvd.reducescatter_async(value(R, (N + 1, 2), torch.float64), op=hvd.Sum, name=f"{tag}.rs"),
            lambda: hvd.grouped_allgather_async([value(R, (1,), torch.int8), value(R, (R + 1,), torch.int8)],
                                                name=f"{tag}.gag"),
        ]
        order = list(range(len(starts))) if R % 2 == 0 else list(reversed(range(len(starts))))
        handles = {i: starts[i]() for i in order}
        results = []
        for i in range(len(starts)):
            got = hvd.synchronize(handles[i])
            results.extend(got if isinstance(got, (list, tuple)) else [got])
        return results


    def fused(tag):  # allreduces of one dtype negotiated in one round: fused into one group
        handles = [hvd.allreduce_async(value(R, (3, k + 1), torch.int64), op=hvd.Sum, name=f"{tag}.{k}")
                   for k in range(6)]
        grouped = hvd.grouped_allreduce([value(R, (4,), torch.float32), value(R, (2, 2), torch.float32, 1),
                                         value(R, (3,), torch.bfloat16)], op=hvd.Sum, name=f"{tag}.g")
        return [hvd.synchronize(h) for h in handles] + grouped

    both("allreduce async fused", fused, ["allreduce_start"])
    both("async in flight", in_flight, ["allgather_start", "broadcast_start", "alltoall_start", "reducescatter_start"])

    # -- non-contiguous in place, and gradients ---------------------------------------------------------------
    def non_contiguous(tag):
        t = value(R, (3, 4), torch.float32).t()
        hvd.broadcast_(t, root_rank=N - 1, name=tag)
        return t


    both("broadcast_ non-contiguous", non_contiguous, ["broadcast_start"])


    def allgather_grad(tag):
        x = value(R, (R + 1, 2), torch.float32).requires_grad_()
        y = hvd.allgather(x, name=tag)
        (y * torch.arange(y.numel(), dtype=torch.float32).reshape(y.shape)).sum().backward()
        return [y.detach(), x.grad]


    both("allgather gradient", allgather_grad, ["allgather_start"])


    def alltoall_grad(tag):
        splits = torch.tensor([1] * N, dtype=torch.int32)
        x = value(R, (N, 2), torch.float64).requires_grad_()
        y, received = hvd.alltoall(x, splits=splits, name=tag)
        (y * 3).sum().backward()
        return [y.detach(), received, x.grad]


    both("alltoall gradient", alltoall_grad, ["alltoall_start"])

    # -- the core API's bcast and allgather (ddl_runtime.transports.gpu) on the NCCL transport: the process group,
    # never the host callables
    def core(tag):
        def host(_):
            failures.append(f"{tag}: the core collective went through the host")
        ts = [value(R, (4,), torch.float16), value(R, (2, 3), torch.int64)]
        refs = [TensorRef(t, f"{tag}.{i}", str(t.dtype)[6:], tuple(t.shape), None, "torch") for i, t in enumerate(ts)]
        gpu.bcast(rt, refs, N - 1, host)
        mine = value(R, (R + 1, 2), torch.float32)
        gathered = gpu.allgather(rt, TensorRef(mine, f"{tag}.ag", "float32", tuple(mine.shape), None, "torch"), host)
        return ts + [gathered]

    got = core("core")
    same("core bcast f16", got[0], value(N - 1, (4,), torch.float16))
    same("core bcast i64", got[1], value(N - 1, (2, 3), torch.int64))
    same("core allgather", got[2], torch.cat([value(r, (r + 1, 2), torch.float32) for r in range(N)]))

    # -- a process set of some ranks (every rank adds it; members only use it) ---------------------------------
    members = [0, N - 1] if N > 2 else [1]  # not every rank (that is the global set)
    ps = hvd.add_process_set(members)
    if R in members:
        k = len(members)
        me = members.index(R)
        for dtype in (torch.float32, torch.int64, torch.float16):
            d = str(dtype).replace("torch.", "")
            both(f"set allgather {d}", lambda tag: hvd.allgather(value(R, (me + 1, 2), dtype), name=tag, process_set=ps),
                 ["allgather_start"])
            both(f"set broadcast {d}", lambda tag: hvd.broadcast(value(R, (3,), dtype), root_rank=members[-1], name=tag,
                                                                 process_set=ps), ["broadcast_start"])
            both(f"set alltoall {d}", lambda tag: hvd.alltoall(value(R, (k + 1, 2), dtype),
                                                               splits=[2] + [1] * (k - 1), name=tag, process_set=ps)[0],
                 ["alltoall_start"])
            both(f"set reducescatter {d}", lambda tag: hvd.reducescatter(value(R, (k + 1, 2), dtype), op=hvd.Sum, name=tag,
                                                                         process_set=ps), ["reducescatter_start"])
            both(f"set allreduce {d}", lambda tag: hvd.allreduce(value(R, (4,), dtype), op=hvd.Sum, name=tag,
                                                                 process_set=ps), ["allreduce_start"])
    hvd.barrier()

    # -- join: the last rank joins; the others allreduce with its zeros, and an allgather is refused alike ------
    def joined(tag):
        out = []
        if R != N - 1:
            out.append(hvd.allreduce(value(R, (3,), torch.float32), op=hvd.Sum, name=f"{tag}.ar"))
            try:
                hvd.allgather(value(R, (1,), torch.float32), name=f"{tag}.ag")
                failures.append(f"{tag}: an allgather ran while a rank had joined")
            except Exception as exc:  # the line names the joined rank
                if "called join()" not in str(exc):
                    failures.append(f"{tag}: {exc}")
        out.append(torch.tensor([hvd.join()]))
        return out


    both("join", joined, ["allreduce_start"] if R != N - 1 else [])



def pinned_checks():
    # -- host staging (a CPU stand-in of the pinned pool): allgather's and alltoall's outputs are pool memory ---
    made = []


    def allocate(n, dtype):
        buf = host.cpu_allocator(n, dtype)
        made.append(buf)
        return buf


    staging = host.Staging(host.PinnedPool(allocate), host.HostCopies())


    def in_pool(arr: np.ndarray) -> bool:
        at = arr.__array_interface__["data"][0]
        return any(b.data_ptr() <= at and at + arr.nbytes <= b.data_ptr() + b.numel() * b.element_size() for b in made)


    real_staging = mpi_ops._staging
    mpi_ops._staging = lambda tensors: staging
    for rnd in range(2):
        x = value(R, (R + 1, 3), torch.bfloat16)
        handle, finish = mpi_ops._allgather_start([x], f"pin.ag{rnd}", hvd.global_process_set, "allgather", False)
        handle.wait()
        if not in_pool(handle.request.outputs[0]):
            failures.append(f"staged allgather round {rnd}: its output is not pinned-pool memory")
        (got,) = finish(handle)
        same(f"staged allgather round {rnd}", got, torch.cat([value(r, (r + 1, 3), torch.bfloat16) for r in range(N)]))
        x = value(R, (2 * N, 2), torch.int16)
        handle, finish = mpi_ops._alltoall_start(x, None, f"pin.aa{rnd}", hvd.global_process_set, "alltoall")
        handle.wait()
        if not in_pool(handle.request.outputs[0]):
            failures.append(f"staged alltoall round {rnd}: its output is not pinned-pool memory")
        got, _ = finish(handle)
        same(f"staged alltoall round {rnd}", got, torch.cat([value(r, (2 * N, 2), torch.int16)[2 * R:2 * R + 2]
                                                             for r in range(N)]))
        if rnd == 0:
            first = staging.pool.allocations
    if staging.pool.allocations != first:
        failures.append(f"the second round made {staging.pool.allocations - first} more pool buffers (outputs not given back)")
    mpi_ops._staging = real_staging



if sys.argv[1:] == ["pinned"]:
    pinned_checks()
else:
    device_route_checks()
report = MPI.COMM_WORLD.gather({"rank": R, "failures": failures, "calls": dict(calls)}, root=0)
if R == 0:
    print("SUMMARY " + json.dumps(report), flush=True)
hvd.shutdown()
