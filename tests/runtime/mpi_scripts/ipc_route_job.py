"""The ipc transport wired into the runtime, on CPU through its stand-in (2+ real MPI ranks).

The job's transport is set to ipc and ddl_runtime.transports.gpu.ipc's CUDA backend is replaced by the CPU
stand-in (gpu/ipc_standin.py), so the runtime's own calls run the glue a shared GPU runs:
gpu.allreduce_start (ddl_runtime's allreduce_n_async on device tensors: it returns before the
reduction ran, wait() gives the result), gpu.bcast, gpu.allgather, horovod's negotiated device
allreduce (negotiation._post_allreduce_device -> gpu.device_allreduce_start: its own IPC group,
ranks submitting in opposite orders), and finalize closing both groups.  Rank 0 prints SUMMARY.
"""
import json
from types import SimpleNamespace

import torch
from mpi4py import MPI

import ddl_runtime as ddl
import ddl_runtime.horovod.torch as hvd
from ddl_runtime.transports import gpu
from ddl_runtime.state import runtime as _rt
from ddl_runtime.transports.gpu import ipc
from ddl_runtime.transports.gpu.ipc_standin import StandInBackend
from ddl_runtime.transports.gpu.transport import Transport, state
from ddl_runtime.horovod.common.process_sets import global_process_set
from ddl_runtime.horovod.common.requests import submit

ddl.init()
hvd.init()
R, N = ddl.rank(), ddl.size()
rt = _rt.current()
backends = []
ipc.CudaBackend = lambda index: backends.append(StandInBackend(delay_s=0.02)) or backends[-1]
state(rt).transport = Transport("ipc", "stand-in")
state(rt).index = 0
failures = []


def value(rank, n, dtype=torch.float32, shift=0):
    return (torch.arange(n, dtype=torch.float64) % 5 + rank + shift).to(dtype)


def check(label, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{label}: got {got.flatten()[:5].tolist()}, want {want.flatten()[:5].tolist()}")


total = lambda n, shift=0: sum(value(r, n, torch.float64, shift) for r in range(N))  # noqa: E731
ts = [value(R, 100), value(R, 8, torch.float64, 1)]
pending = gpu.allreduce_start(rt, [], ts, "avg", ts, None)
if not torch.equal(ts[0], value(R, 100)):
    failures.append("allreduce_start: returned after its reduction ran (no overlap)")
out = pending.wait()
if out is not ts:
    failures.append("allreduce_start: wait() did not return the results")
check("allreduce avg f32", ts[0], (total(100) / N).to(torch.float32))
check("allreduce avg f64", ts[1], total(8, 1) / N)
b = value(R, 6, shift=3)
gpu.bcast(rt, [SimpleNamespace(obj=b, device="cuda")], N - 1, None)  # a CUDA ref's fields the route reads
check("bcast", b, value(N - 1, 6, shift=3))
got = gpu.allgather(rt, SimpleNamespace(obj=torch.full((R + 1, 2), float(R)), device="cuda"), None)
check("allgather", got, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(N)]))

# horovod's negotiated device route: opposite submit orders, fused per dtype, its own IPC group
cases = [("n.a", "sum", 5), ("n.b", "average", 3), ("n.c", "max", 4)]
handles = {}
for name, op, n in (cases if R % 2 == 0 else list(reversed(cases))):
    t = value(R, n)
    handles[name] = (submit("allreduce", name, (op, 1.0, 1.0), [t], [t], global_process_set, name), t)
for name, op, n in cases:
    handle, t = handles[name]
    handle.wait()
    vals = torch.stack([value(r, n, torch.float64) for r in range(N)])
    want = {"sum": vals.sum(0), "average": vals.sum(0) / N, "max": vals.max(0).values}[op].to(torch.float32)
    check(f"negotiated {name}", handle.request.outputs[0], want)
groups = sorted(state(rt).ipc_groups)
if groups != ["native", "negotiated"]:
    failures.append(f"IPC groups {groups}, want one per stream of calls")
report = MPI.COMM_WORLD.gather({"rank": R, "failures": failures, "groups": groups}, root=0)
if R == 0:
    print("SUMMARY " + json.dumps(report), flush=True)
hvd.shutdown()
ddl.finalize()
if state(rt).ipc_groups:
    print(f"rank {R}: finalize left IPC groups open", flush=True)
for backend in backends:
    backend.close()
