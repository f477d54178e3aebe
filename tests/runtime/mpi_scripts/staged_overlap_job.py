"""The host transport's allreduce_n_async (ddl_runtime.transports.gpu.staged) on CPU, 2+ real MPI ranks.

CPU tensors take the route CUDA tensors take on the host transport: the runtime's device state says
"host" and its staging is plain host memory whose copies are `GatedCopies`, a stand-in for a GPU
still running the work that produces the tensors: a device-to-host copy reads its source only once
the test opens the gate (it then copies what the tensor holds by then), host-to-device copies land
at once.  `ops._on_device` says yes for every tensor, so ddl.allreduce_n_async and ddl.allreduce
of these CPU tensors take the CUDA tensors' route (agreement, transport, staging) unchanged.

Checks (rank 0 prints one SUMMARY line):
  * overlap: the async call returns while the gate is shut (today's synchronous staging waits
    for the copy: a timer opens the gate after HOLD_S so the old code ends, late and wrong); done()
    is False until the gate opens; wait() gives the reduction of what the tensors held at the copy;
  * several calls in flight (sum, avg; float32, float64, bfloat16, float16, int64; one
    over the small path's 256 KB, one that grows the arena while others are queued), waited in
    reverse order, each right; the same calls again make no new pooled buffer;
  * the async results bit-equal to the synchronous staging's for the same inputs.
A last call is left unwaited: finalize finishes it on every rank before they leave.
With argv "fault": rank 1's second device-to-host copy raises; the job must end with one line
naming rank 1 and the call, on every rank, instead of hanging.  With argv "sync" (run under
DDL_SHM=0: no shared memory for the stream), the synchronous staging must give the same results.
"""
import json
import sys
import threading
import time

import torch
from mpi4py import MPI

import ddl_runtime as ddl
from ddl_runtime.collectives import ops
from ddl_runtime.state import runtime as _rt
from ddl_runtime.transports.gpu import host, transport

HOLD_S = 3.0

ddl.init()
rt = _rt.current()
R, N = ddl.rank(), ddl.size()
FAULT = sys.argv[1:] == ["fault"]
SYNC = sys.argv[1:] == ["sync"]
failures = []


class GatedCopies(host.HostCopies):
    """Immediate copies, except that device-to-host ones wait for `gate` (see the module docstring)."""

    def __init__(self):
        self.gate = threading.Event()
        self.gate.set()
        self.copies_out = 0

    def start_to_host(self, srcs, dsts):
        return list(srcs), list(dsts)

    def finish_to_host(self, token):
        self.copies_out += 1
        if FAULT and R == 1 and self.copies_out == 2:
            raise RuntimeError("device-to-host copy failed (injected)")
        self.gate.wait()
        super().to_host(*token)

    def to_host(self, srcs, dsts):  # the synchronous staging's copy: waits for the gate too
        self.finish_to_host(self.start_to_host(srcs, dsts))


copies = GatedCopies()
staging = host.Staging(host.PinnedPool(host.cpu_allocator), copies)
rt.gpu = transport.GpuState(None, transport=transport.Transport("host", "test: CPU stand-in"), staging=staging)
ops._on_device = lambda refs: True  # these CPU tensors take the CUDA tensors' route


def start(tensors, op, tag):
    return ddl.allreduce_n_async(tensors, op=op, names=[f"{tag}.{i}" for i in range(len(tensors))])


def value(rank, n, dtype, shift=0):
    return (torch.arange(n, dtype=torch.float64) % 7 + rank * 3 + shift).to(dtype)


def expect(op, n, dtype, shift=0):
    vals = torch.stack([value(r, n, torch.float64, shift) for r in range(N)])
    total = vals.sum(0)  # exact: small integers
    return (total / N if op == "avg" else total).to(dtype)


def check(label, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{label}: got {got.flatten()[:6].tolist()} {got.dtype}, want {want.flatten()[:6].tolist()}")


if FAULT:
    for k in range(3):
        start([value(R, 8, torch.float32, k)], "sum", f"fault{k}").wait()
    print(f"UNREACHED rank {R}", flush=True)
    ddl.finalize()
    sys.exit(0)

# -- overlap: the call returns while the "GPU" still computes ---------------------------------------
returned = None
grad = torch.full((1000,), -1.0)
if SYNC:
    grad.copy_(value(R, 1000, torch.float32))
    start([grad], "sum", "sync-overlap").wait()
    check("synchronous staging", grad, expect("sum", 1000, torch.float32))
else:
    copies.gate.clear()
    opener = threading.Timer(HOLD_S, copies.gate.set)  # the old synchronous staging would wait for ever
    opener.start()
    t0 = time.perf_counter()
    handle = start([grad], "sum", "overlap")
    returned = time.perf_counter() - t0
    if returned > HOLD_S / 3:
        failures.append(f"allreduce_n_async returned after {returned:.2f} s, only once the copy could run")
    if copies.gate.is_set():
        failures.append("the gate opened before the call returned: the call waited for the copy")
    elif handle.done():
        failures.append("done() is True while the copy cannot have run")
    grad.copy_(value(R, 1000, torch.float32))  # the producing work ends after the call ...
    copies.gate.set()  # ... and the device-to-host copy runs after it
    opener.cancel()
    results = handle.wait()
    if results[0] is not grad or not handle.done():
        failures.append("wait() did not return the input tensor, or done() is False after it")
    check("overlap: the reduction of what the tensor held at the copy", grad, expect("sum", 1000, torch.float32))

# -- several in flight, waited in reverse order; twice, for the pool ---------------------------------
CASES = [("sum", torch.float32, 5), ("avg", torch.float64, 7), ("sum", torch.bfloat16, 6), ("avg", torch.float16, 4),
         ("sum", torch.int64, 9), ("avg", torch.float32, 3), ("sum", torch.float32, 100_000),  # 400 KB: the arena
         ("avg", torch.float32, 300_000)]  # 1.2 MB: the arena grows while the others are queued
allocations = []
for step in range(2):
    inflight = []
    for k, (op, dtype, n) in enumerate(CASES):
        ts = [value(R, n, dtype, k + step), value(R, 3, dtype, k)]
        inflight.append((op, dtype, n, k, ts, start(ts, op, f"s{step}.c{k}")))
    for op, dtype, n, k, ts, h in reversed(inflight):
        got = h.wait()
        if got[0] is not ts[0]:
            failures.append(f"step {step} case {k}: wait() did not return the inputs")
        check(f"step {step} {op} {dtype} n={n}", ts[0], expect(op, n, dtype, k + step))
        check(f"step {step} {op} {dtype} second tensor", ts[1], expect(op, 3, dtype, k))
    allocations.append(staging.pool.allocations)
if allocations[1] != allocations[0]:
    failures.append(f"the second round of the same calls made new pooled buffers: {allocations}")

# -- the same bits as the synchronous staging -----------------------------------------------------------
for op, dtype, n in (("avg", torch.float32, 70_000), ("sum", torch.bfloat16, 1000), ("avg", torch.float16, 50)):
    a = [torch.linspace(-3, 3, n).to(dtype) * (R + 1) / 7]
    b = [a[0].clone()]
    start(a, op, "async").wait()
    ddl.allreduce_n(b, op=op, names=["sync.0"])
    if not torch.equal(a[0], b[0]):
        failures.append(f"{op} {dtype}: async and synchronous staging differ")

stream = getattr(rt.gpu, "staged", None)
if SYNC and stream:
    failures.append("a staged stream was opened without shared memory (DDL_SHM=0)")
elif not SYNC and not stream:
    failures.append("no staged stream was opened on a one-host job with shared memory")
last = start([value(R, 50_000, torch.float32)], "sum", "unwaited")  # finalize finishes it
report = MPI.COMM_WORLD.gather({"rank": R, "failures": failures, "returned_s": returned,
                                "allocations": allocations}, root=0)
if R == 0:
    print("SUMMARY " + json.dumps(report), flush=True)
ddl.finalize()
