"""Horovod's negotiated allreduce on the device route, on CPU through gloo (2+ real MPI ranks).

Torch tensors submitted as they are (not as host numpy arrays) are announced "<dtype>@<device>"
and, once negotiated, reduced where they lie through the runtime's process group
(negotiation._post_allreduce_device -> gpu/nccl.py).  horovod.torch submits CUDA tensors this way
when the job's transport is NCCL; here CPU tensors and a gloo group (bootstrapped the way the
runtime bootstraps NCCL) run that very code, and mpi_ops._allreduce_on_device (the request
horovod.torch builds for that route).  Ranks submit in different orders; one name is reduced
while the last rank has joined.  Rank 0 prints one SUMMARY line.
"""
import json

import torch
from mpi4py import MPI

import ddl_runtime.horovod.torch as hvd
from ddl_runtime.state import runtime as _rt
from ddl_runtime.transports.gpu import nccl
from ddl_runtime.horovod.common.process_sets import global_process_set
from ddl_runtime.horovod.common.requests import submit
from ddl_runtime.horovod.torch import mpi_ops

hvd.init()
R, N = hvd.rank(), hvd.size()
rt = _rt.current()
nccl.process_group(rt, backend="gloo")
failures = []


def value(rank, n, dtype, shift=0):
    return (torch.arange(n, dtype=torch.float64) % 5 + rank + shift).to(dtype)


def total(n, dtype, shift=0, ranks=None):
    return sum(value(r, n, torch.float64, shift) for r in (ranks if ranks is not None else range(N)))


CASES = [  # name, op, prescale, postscale, dtype, n, in place
    ("a.f32.sum", "sum", 1.0, 1.0, torch.float32, 7, False),
    ("b.f32.avg", "average", 1.0, 1.0, torch.float32, 5, True),
    ("c.f64.scaled", "sum", 2.0, 0.5, torch.float64, 3, False),
    ("d.i64.max", "max", 1.0, 1.0, torch.int64, 4, True),
    ("e.f16.min", "min", 1.0, 1.0, torch.float16, 6, False),
    ("f.bf16.sum", "sum", 1.0, 1.0, torch.bfloat16, 4, False),
    ("g.f32.sum", "sum", 1.0, 1.0, torch.float32, 3, False),  # fused with a.f32.sum
]
order = CASES if R % 2 == 0 else list(reversed(CASES))  # the negotiation puts them in one order
handles = {}
for name, op, pre, post, dtype, n, inplace in order:
    t = value(R, n, dtype)
    handles[name] = (submit("allreduce", name, (op, pre, post), [t], [t if inplace else None], global_process_set,
                            f"allreduce('{name}')"), t)
for name, op, pre, post, dtype, n, inplace in CASES:
    handle, t = handles[name]
    handle.wait()
    out = handle.request.outputs[0]
    if not isinstance(out, torch.Tensor):
        failures.append(f"{name}: the result is a {type(out).__name__}, not a tensor reduced where it lies")
        continue
    vals = torch.stack([value(r, n, torch.float64) for r in range(N)])
    want = {"sum": vals.sum(0) * pre * post, "average": vals.sum(0) / N, "max": vals.max(0).values,
            "min": vals.min(0).values}[op].to(dtype)
    if not torch.equal(out, want):
        failures.append(f"{name}: got {out.tolist()}, want {want.tolist()}")
    if inplace and out.data_ptr() != t.data_ptr():
        failures.append(f"{name}: the in-place result is not in the input's memory")

# horovod.torch's request for the device route (mpi_ops._allreduce_on_device), here on CPU tensors:
# in place into the input, and a group of two into new tensors
t = value(R, 5, torch.float32)
handle, finish = mpi_ops._allreduce_on_device([t], [t], "ip", "sum", 1.0, 1.0, global_process_set, "ip", False)
handle.wait()
(res,) = finish(handle)
if res is not t or not torch.equal(t, total(5, torch.float64).to(torch.float32)):
    failures.append(f"_allreduce_on_device in place: {res.tolist()}")
pair = [value(R, 3, torch.float16), value(R, 2, torch.float64, 1)]
handle, finish = mpi_ops._allreduce_on_device(pair, None, "grp", "average", 1.0, 1.0, global_process_set, "grp", True)
handle.wait()
got = finish(handle)
for g, p, want in zip(got, pair, [total(3, torch.float64) / N, total(2, torch.float64, 1) / N]):
    if g.data_ptr() == p.data_ptr() or not torch.equal(g, want.to(g.dtype)) or not torch.equal(p, value(R, p.numel(), p.dtype, 0 if p.dtype == torch.float16 else 1)):
        failures.append(f"_allreduce_on_device group: {g.tolist()} (input now {p.tolist()})")

# the last rank joins; the others reduce 'j' with the joined rank's zeros
if R != N - 1:
    t = value(R, 4, torch.float32)
    h = submit("allreduce", "j", ("sum", 1.0, 1.0), [t], [None], global_process_set, "allreduce('j')")
    h.wait()
    want = sum(value(r, 4, torch.float64) for r in range(N - 1)).to(torch.float32)
    if not torch.equal(h.request.outputs[0], want):
        failures.append(f"join: got {h.request.outputs[0].tolist()}, want {want.tolist()}")
last = hvd.join()
if N > 1 and last == N - 1:  # it joined first, while the others were still reducing 'j'
    failures.append(f"join returned {last}, the rank that joined first")

report = MPI.COMM_WORLD.gather({"rank": R, "failures": failures}, root=0)
if R == 0:
    print("SUMMARY " + json.dumps(report), flush=True)
hvd.shutdown()
