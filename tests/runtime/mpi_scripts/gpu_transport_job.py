"""The device transports' code on CPU, with real MPI ranks (no GPU needed).

  * nccl: ddl_runtime.transports.gpu.nccl's collectives through a gloo group bootstrapped the way the runtime
    bootstraps NCCL (nccl.process_group(rt, "gloo")), on CPU tensors;
  * host: the host-staging logic (host.Staging with HostCopies and a CPU allocator) through the
    runtime's CPU engine, and its pool reused across calls;
  * the device checks agreed across ranks (ops._agree_devices) and the transport agreement
    (transport.agree) with settings that differ by rank: one error on every rank, ranks in step after.

Rank 0 prints one SUMMARY line: every rank's {"rank", "failures", "errors"}.
"""
import json
import os

import numpy as np
import torch
from mpi4py import MPI

import ddl_runtime as ddl
from ddl_runtime.collectives import ops
from ddl_runtime.state import runtime as _rt
from ddl_runtime.engine.buffers import TensorRef
from ddl_runtime.transports.gpu import host, nccl, transport

ddl.init()
rt = _rt.current()
R, N = ddl.rank(), ddl.size()
failures, errors = [], {}
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.bfloat16]


def value(rank, n, dtype, shift=0):
    return (torch.arange(n, dtype=torch.float64) % 7 + rank * 3 + shift).to(dtype)


def expect(op, n, dtype, shift=0):
    vals = torch.stack([value(r, n, torch.float64, shift) for r in range(N)])
    out = {"sum": vals.sum(0), "avg": vals.sum(0) / N, "min": vals.min(0).values, "max": vals.max(0).values}[op]
    return out.to(dtype)


def check(label, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{label}: got {got.flatten()[:6].tolist()} {got.dtype}, want {want.flatten()[:6].tolist()}")


# -- what init gathered: every rank's setting and GPU (none here), so no transport is decided yet --------
if rt.gpu is None or rt.gpu.everyone is None or len(rt.gpu.everyone) != N or transport.decided(rt) is not None:
    failures.append(f"init did not gather every rank's GPU: {rt.gpu}")

# -- the NCCL path through gloo --------------------------------------------------------------------
group = nccl.process_group(rt, backend="gloo")
for op in ("sum", "avg", "min", "max"):
    for dtype in DTYPES:
        if op == "avg" and not dtype.is_floating_point:
            continue
        t = value(R, 5, dtype).reshape(5)
        nccl.allreduce(group, [t], op, N)
        check(f"nccl {op} {dtype}", t, expect(op, 5, dtype))
# a fused group: several tensors of several dtypes, one all_reduce per dtype, async
fused = [value(R, 3, torch.float32).reshape(3), value(R, 6, torch.float32, 1).reshape(2, 3),
         value(R, 4, torch.int64, 2), value(R, 2, torch.bfloat16, 3), torch.zeros(0)]
pending = nccl.allreduce_start(group, fused, "sum", N, fused)
results = pending.wait()
if results is not fused or not pending.done():
    failures.append("nccl async: wait() did not return the results or done() is False after it")
check("nccl fused f32 a", fused[0], expect("sum", 3, torch.float32))
check("nccl fused f32 b", fused[1], expect("sum", 6, torch.float32, 1).reshape(2, 3))
check("nccl fused i64", fused[2], expect("sum", 4, torch.int64, 2))
check("nccl fused bf16", fused[3], expect("sum", 2, torch.bfloat16, 3))
b = [value(R, 4, torch.float16), value(R, 3, torch.int32)]
nccl.broadcast(group, b, root=1)
check("nccl bcast f16", b[0], value(1, 4, torch.float16))
check("nccl bcast i32", b[1], value(1, 3, torch.int32))
mine = torch.full((R + 1, 2), float(R), dtype=torch.float32)  # first dims differ: 1, 2, ...
gathered = nccl.allgather(group, mine, N)
check("nccl allgather", gathered, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(N)]))

# -- host staging through the CPU engine -------------------------------------------------------------
staging = host.Staging(host.PinnedPool(host.cpu_allocator), host.HostCopies())
for step in range(3):  # the same shapes every step: the pool's buffers are reused
    ts = [value(R, 5, torch.float32, step).reshape(5), value(R, 4, torch.bfloat16, step), value(R, 3, torch.int64)]
    staging.allreduce(ts, lambda hosts: ddl.allreduce_n(hosts, op="sum", names=["a", "b", "c"]))
    check(f"host step {step} f32", ts[0], expect("sum", 5, torch.float32, step))
    check(f"host step {step} bf16", ts[1], expect("sum", 4, torch.bfloat16, step))
    check(f"host step {step} i64", ts[2], expect("sum", 3, torch.int64))
if staging.pool.allocations != 3:  # float32, bfloat16, int64: one buffer each, made once
    failures.append(f"host pool made {staging.pool.allocations} buffers for 3 steps of the same 3 dtypes")
tb = [value(R, 4, torch.float64)]
staging.bcast(tb, R == 0, lambda hosts: ddl.bcast_n(hosts, root=0, names=["b"]))
check("host bcast", tb[0], value(0, 4, torch.float64))
out = staging.allgather(mine, lambda h: ddl.allgather(h, name="g"))
check("host allgather", out, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(N)]))


# -- agreed device checks ----------------------------------------------------------------------------
def ref(name, device="cuda", index=0):
    return TensorRef(None, name, "float32", (4,), None, "torch", device, index=index)


CASES = {  # label: (this rank's refs, this rank's GPU index); only rank N-1 is wrong unless said
    "no-gpu": lambda last: ([ref("w.grad")], None if last else 0),
    "other-gpu": lambda last: ([ref("w.grad", index=1 if last else 0)], 0),
    "mixed-group": lambda last: ([ref("a", "cpu", None) if last else ref("a"), ref("w.grad")], 0),
    "every-rank-no-gpu": lambda last: ([ref("w.grad")], None),
}
for label, make in CASES.items():
    refs, index = make(R == N - 1)
    what = ops._describe("allreduce_n", refs)
    try:
        ops._agree_devices(rt, what, (("allreduce_n", "sum"), tuple(ops._entry(r) for r in refs)), refs, index)
        errors[label] = None
    except Exception as exc:  # noqa: BLE001 - recorded for the test
        errors[label] = {"type": type(exc).__name__, "error": str(exc)}
    after = np.full(2, float(R))
    ddl.allreduce(after, name=f"after.{label}")
    if after[0] != sum(range(N)):
        failures.append(f"{label}: the allreduce after it was wrong (ranks out of step)")

# -- transport agreement with settings that differ by rank ------------------------------------------
for label, setting in {"disagree": "nccl" if R == 0 else "host", "bad-value": "gpu" if R == N - 1 else "",
                       "forced-host": "host"}.items():
    os.environ[transport.ENV] = setting
    rt.gpu = None
    try:
        chosen = transport.agree(rt)
        errors[label] = {"type": None, "error": chosen.name + ": " + chosen.reason}
    except Exception as exc:  # noqa: BLE001
        errors[label] = {"type": type(exc).__name__, "error": str(exc)}
rt.gpu = None

report = MPI.COMM_WORLD.gather({"rank": R, "failures": failures, "errors": errors}, root=0)
if R == 0:
    print("SUMMARY " + json.dumps(report), flush=True)
ddl.finalize()
